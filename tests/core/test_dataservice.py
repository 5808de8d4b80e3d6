"""The tf.data service's pure rules (raytf/_core/dataservice.py) and its config keys: what the servers reserve and
run with, job names, what TF cannot serve, placement before anything is reserved, lost servers, the lines."""

import os

import pytest

import raytf
from raytf._core import dataservice as ds
from raytf._core import failure
from raytf._core.plan import make_plan
from raytf.config import ProcessingMode
from raytf.errors import ConfigError


def cfg(*overrides: str):
    return raytf.load_config("conf/local.yaml", list(overrides))


# -- config ----------------------------------------------------------------------------------------------------------
def test_off_by_default_and_each_key_read():
    assert cfg().data_service.workers == 0
    d = cfg("data_service.workers=3", "data_service.cpus=2", "data_service.resources.preprocess=1",
            "data_service.processing_mode=parallel_epochs").data_service
    assert (d.workers, d.cpus, d.resources) == (3, 2, {"preprocess": 1})
    assert d.processing_mode is ProcessingMode.parallel_epochs


@pytest.mark.parametrize(("overrides", "expected"), [
    (["data_service.workers=-1"], "data_service.workers (-1) must be 0 (off) or more, e.g. 2"),
    (["data_service.cpus=-1"], "data_service.cpus (-1.0) must be a finite number 0 or more"),
    (["data_service.workers=1", "data_service.cpus=0"], "data_service.workers (1) reserve nothing"),
    (["data_service.resources.preprocess=0"], "data_service.resources.preprocess (0.0) must be a finite number"),
    (["data_service.processing_mode=dynamic"], "data_service.processing_mode: Invalid value 'dynamic', expected one of "
                                               "[distributed_epoch, parallel_epochs]"),
    (["data_service.worker=2"], "Key 'worker' not in 'DataServiceConfig'"),
])
def test_bad_values_are_one_line_naming_the_key(overrides, expected):
    with pytest.raises(ConfigError) as e:
        cfg(*overrides)
    assert expected in str(e.value) and "\n" not in str(e.value)


def test_cpus_zero_with_a_custom_resource_is_a_reservation():
    assert cfg("data_service.workers=1", "data_service.cpus=0", "data_service.resources.preprocess=1")


def test_port_range_counts_the_service_servers():
    cfg("cluster.port_range=[20000,20004]", "data_service.workers=2")  # 2 tasks + dispatcher + 2 workers
    with pytest.raises(ConfigError, match=r"the run's 2 tasks and 3 tf.data service servers may all land on one host"):
        cfg("cluster.port_range=[20000,20003]", "data_service.workers=2")


# -- what the servers and the tasks get ------------------------------------------------------------------------------
def test_bundles_threads_and_runtime_env():
    c = cfg("data_service.workers=2", "data_service.cpus=2", "data_service.resources.preprocess=1",
            "ray.runtime_env.env_vars.OMP_NUM_THREADS=8", "ray.runtime_env.env_vars.MY_KEY=1")
    assert ds.bundles(c) == [{"CPU": 2.0, "preprocess": 1.0}] * 2
    assert ds.threads(c) == 2
    env = ds.runtime_env(c, ds.WORKER)["env_vars"]
    assert env["TF_GRPC_REUSE_PORT"] == "true" and env["MY_KEY"] == "1"
    assert env["OMP_NUM_THREADS"] == "8"  # the user's own wins, as for the tasks
    assert ds.runtime_env(cfg("data_service.workers=1"), ds.DISPATCHER)["env_vars"]["OMP_NUM_THREADS"] == "1"
    custom_only = cfg("data_service.workers=1", "data_service.cpus=0", "data_service.resources.p=1")
    assert ds.bundles(custom_only) == [{"p": 1.0}]


def test_the_service_record_travels_as_json():
    s = ds.Service("10.0.0.1:2000", "distributed_epoch", 2, "r", 3)
    assert ds.Service.from_json(s.to_json()) == s and s.target == "grpc://10.0.0.1:2000"


def test_job_names_differ_by_attempt_epoch_call_and_group():
    s = ds.Service("h:1", "distributed_epoch", 1, "run", 1)
    names = {ds.job_name(s, group=g, epoch=e, call=c) for g in ("train", "eval") for e in (0, 1) for c in (0, 1)}
    names.add(ds.job_name(ds.Service("h:1", "distributed_epoch", 1, "run", 2), group="train", epoch=0, call=0))
    assert len(names) == 9
    assert ds.job_name(s, group="train", epoch=0, call=0) == ds.job_name(s, group="train", epoch=0, call=0)


# -- what TF cannot serve --------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("ops", "named"), [
    ({"RangeDataset", "MapDataset", "EagerPyFunc"}, "tf.py_function"),
    ({"FlatMapDataset", "GeneratorDataset", "PyFunc"}, "tf.data.Dataset.from_generator"),
    ({"MapDataset", "PyFunc"}, "tf.numpy_function"),
    ({"MapDataset", "PyFuncStateless", "EagerPyFunc"}, "tf.numpy_function and tf.py_function"),
])
def test_python_in_the_pipeline_is_named_with_tfs_limit(ops, named):
    line = ds.unservable(ops)
    assert f"the pipeline uses {named}, which runs Python code" in line
    assert "Limitations" in line and "Fix:" in line and "\n" not in line
    assert "tf.numpy_function" not in line or "from_generator" not in line  # (a generator's PyFunc: one name)


def test_a_graph_only_pipeline_is_servable_and_the_error_is_a_config_failure():
    assert ds.unservable({"RangeDataset", "MapDataset", "BatchDatasetV2", "ReadFile"}) is None
    assert ds.Unservable.failure_kind == failure.CONFIG
    assert failure.exit_failure(1, [], "Unservable") == (failure.CONFIG, "Unservable")  # a script's too


# -- placement, before anything is reserved ---------------------------------------------------------------------------
def test_more_workers_than_the_cluster_has_is_one_line_naming_the_keys():
    c = cfg("data_service.workers=3", "cluster.worker.cpus=0.5")
    nodes = [{"CPU": 2.0}]
    line = ds.placement_problem(c, make_plan(c).bundles, nodes, "PACK")
    assert line.startswith("data_service.workers=3, each {CPU: 1} (data_service.cpus, data_service.resources) can "
                           "never be placed on this Ray: the cluster lacks {CPU: 1}")
    assert "Fix: fewer service workers" in line


def test_workers_that_fit_alone_but_not_beside_the_tasks():
    c = cfg("data_service.workers=1")  # 2 workers of 1 CPU + 1 service worker of 1 CPU on 2 CPUs
    line = ds.placement_problem(c, make_plan(c).bundles, [{"CPU": 2.0}], "PACK")
    assert "can never be placed beside the run's tasks" in line and "the cluster lacks {CPU: 1}" in line


def test_a_custom_resource_no_node_has():
    c = cfg("data_service.workers=1", "data_service.resources.preprocess=1", "cluster.worker.cpus=0.5")
    line = ds.placement_problem(c, make_plan(c).bundles, [{"CPU": 4.0}], "PACK")
    assert "{CPU: 1, preprocess: 1}" in line and "lacks {preprocess: 1}" in line


def test_what_fits_says_nothing():
    c = cfg("data_service.workers=1", "cluster.worker.cpus=0.5")
    assert ds.placement_problem(c, make_plan(c).bundles, [{"CPU": 2.0}], "PACK") is None
    assert ds.placement_problem(cfg(), make_plan(cfg()).bundles, [], "PACK") is None  # off


# -- lost servers -----------------------------------------------------------------------------------------------------
def test_a_lost_server_is_started_again_until_its_budget_is_spent():
    assert ds.on_lost(ds.WORKER, 1, 0, "killed", node_alive=True) == ds.Restart(ds.WORKER, 1)
    assert ds.on_lost(ds.DISPATCHER, 0, ds.MAX_RESTARTS - 1, "x", node_alive=True) == ds.Restart(ds.DISPATCHER, 0)
    spent = ds.on_lost(ds.WORKER, 1, ds.MAX_RESTARTS, "killed", node_alive=True)
    assert isinstance(spent, ds.Fail) and spent.kind == failure.SYSTEM
    assert spent.message == f"tf.data service: service worker 1 was lost {ds.MAX_RESTARTS + 1} times in this attempt " \
                            "(last: killed)"


@pytest.mark.parametrize(("role", "held"), [(ds.DISPATCHER, "its journal and its address"),
                                            (ds.WORKER, "the tasks TF's consumers wait for")])
def test_a_server_lost_with_its_node_fails_the_attempt(role, held):
    lost = ds.on_lost(role, 0, 0, "node died", node_alive=False)
    assert isinstance(lost, ds.Fail) and held in lost.message and lost.kind == failure.SYSTEM


def test_the_lost_lines_say_what_each_mode_loses():
    assert "nothing is lost" in ds.lost_line(ds.DISPATCHER, 0, "killed", ProcessingMode.distributed_epoch)
    assert "at most once" in ds.lost_line(ds.WORKER, 1, "killed", ProcessingMode.distributed_epoch)
    assert "start the pipeline over" in ds.lost_line(ds.WORKER, 1, "killed", "parallel_epochs")


# -- what the run says ------------------------------------------------------------------------------------------------
def test_runs_show_line():
    summary = {"workers": 2, "cpus": 1.0, "resources": {"preprocess": 1}, "processing_mode": "distributed_epoch",
               "attempts": [{"attempt": 1, "dispatcher": "10.0.0.5:2000", "workers": ["a:1", "b:2"],
                             "used_by": [0, 1]}],
               "lost": [{"attempt": 1, "server": "worker 1", "host": "b", "time": 0.0, "cause": "x"}]}
    assert ds.input_line(summary) == (
        "input      served by the tf.data service: 2 worker(s) {CPU: 1, preprocess: 1} (distributed_epoch), "
        "dispatcher 10.0.0.5:2000; read by rank(s) 0, 1; 1 server(s) lost: worker 1 (attempt 1)")
    summary["attempts"][0]["used_by"], summary["lost"] = [], []
    assert ds.input_line(summary).endswith("read by no task (it served nothing)")
    assert ds.input_line(None) is None and ds.input_line({"workers": 0}) is None


def test_the_warnings_name_the_fix():
    assert "served nothing" in ds.unused(2) and "data_service.workers=0" in ds.unused(2)
    assert "train.steps_per_epoch=null" in ds.steps_warning(8) and "ds.repeat()" in ds.steps_warning(8)


def test_unknown_dimensions_besides_the_batch_are_warned_about():
    line = ds.unknown_dims([("element 0", (64, None, None, 3)), ("element 1", (64,)), ("element 2", (None, 5))])
    assert line.startswith("ctx.data_service(ds): element 0 (64, None, None, 3) has unknown dimensions besides the "
                           "batch") and "tf.ensure_shape" in line and "element 2" not in line
    assert ds.unknown_dims([("the element", (None, 28, 28, 3)), ("element 1", (None,))]) is None


@pytest.mark.parametrize("error", [
    "InvalidArgumentError: Graph execution error: ... Matrix size-incompatible: In[0]: [0,3], In[1]: [8,10]",
    "Must provide as many biases as the last dimension of the input tensor: [8] vs. [0,28,28,3] [Op:BiasAdd]"])
def test_an_empty_batch_through_onednns_conv2d_gets_its_fix(error):
    advice = failure.hint(error)
    assert "ds.repeat() before ctx.data_service(ds)" in advice and "TF_ENABLE_ONEDNN_OPTS=0" in advice


def test_journal_sweep_leaves_no_empty_root_behind(tmp_path, monkeypatch):
    """A dispatcher's journal, removed at its end or swept once it is gone: the node keeps no empty journal root."""
    import tempfile

    from raytf._task import dataservice as task_ds
    from raytf._task.scratch import Scratch

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    journal = Scratch("r1", "dispatcher-a1", base=task_ds.journal_root())
    assert task_ds.sweep_journals(timeout_s=0) == []  # its owner lives: kept, and so is the root
    assert os.path.isdir(journal.path)
    journal.remove()
    task_ds.sweep_journals(timeout_s=0)
    assert not os.path.exists(task_ds.journal_root())
