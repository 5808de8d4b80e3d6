"""Functions as values (what the config records of them), a failed run's error, and Ray Train's words read as
raytf's (raytf.compat's pure part). Pure: no Ray, no TensorFlow."""

import pickle
from types import SimpleNamespace

import pytest

import raytf
from raytf._core.function import Functions, PickledFunction, configured, is_label, label, unrunnable
from raytf._core.raytrain import local_ranks, resources, run_overrides, scaling_overrides
from raytf.api.fit import raise_failed
from raytf.config import owns_loop
from raytf.errors import ConfigError, TrainingFailedError, WorkerError
from tests.conftest import ROOT

MAIN = "<function train defined in __main__>"


def test_what_the_config_records_of_a_function():
    assert label("train", "__main__", importable=True) == MAIN  # a script's or a notebook's: sent by value
    assert label("train", "pkg.mod", importable=True) == "pkg.mod:train"  # importable: relaunchable from the CLI
    assert label("train", "pkg.mod", importable=False) == "<function train defined in pkg.mod>"
    nested = "<function make.<locals>.train defined in pkg.mod>"
    assert label("make.<locals>.train", "pkg.mod", importable=True) == nested
    assert label("<lambda>", "__main__", importable=False) == "<function <lambda> defined in __main__>"
    assert is_label(MAIN) and is_label("<function <lambda> defined in __main__>")
    assert not is_label("pkg.mod:train") and not is_label("") and not is_label(None)


def test_a_recorded_function_is_a_valid_entrypoint_and_the_config_says_what_it_was():
    cfg = raytf.load_config(ROOT / "conf/local.yaml", ["train.entrypoint=null"], program={"train.entrypoint": MAIN})
    assert cfg.train.entrypoint == MAIN  # a source without an entrypoint validates with the function given
    functions = Functions(train=PickledFunction(MAIN, b""), evaluate=PickledFunction("pkg.ev:evaluate", b""))
    assert functions.recorded() == {"train.entrypoint": MAIN, "train.eval_entrypoint": "pkg.ev:evaluate"}
    assert functions.for_role("evaluator").label == "pkg.ev:evaluate" and functions.for_role("chief").label == MAIN
    base = raytf.load_config(ROOT / "conf/local.yaml")
    done = configured(base, Functions(train=PickledFunction(MAIN, b"")))
    assert done.train.entrypoint == MAIN and base.train.entrypoint == "examples.keras_cnn:train"  # a copy
    assert configured(base, Functions()) is base and not Functions()
    script = raytf.load_config(ROOT / "conf/script.yaml")
    with pytest.raises(ConfigError, match=r"train_fn= and train.script .* are both given"):
        configured(script, functions)
    message = str(unrunnable("train.entrypoint", MAIN))
    assert "is a function a program gave raytf.fit(train_fn=...)" in message and "train.entrypoint=" in message


@pytest.mark.parametrize("overrides, expected", [
    (["train.entrypoint=pkg:nope.x"], "must look like package.module:function"),
    (["train.ray_train=true", "train.entrypoint=null", "train.script=t.py"], "train.ray_train=true is for"),
    (["train.ray_train=true", "cluster.strategy=parameter_server", "cluster.num_ps=1"], "MultiWorkerMirrored"),
])
def test_program_rules(overrides, expected):
    with pytest.raises(ConfigError, match=expected):
        raytf.load_config(ROOT / "conf/local.yaml", overrides)


def test_a_ray_train_loop_owns_its_epochs_and_checkpoints():
    assert owns_loop(raytf.load_config(ROOT / "conf/local.yaml", ["train.ray_train=true"]))
    assert owns_loop(raytf.load_config(ROOT / "conf/script.yaml"))
    assert not owns_loop(raytf.load_config(ROOT / "conf/local.yaml"))


def _failed():
    root = WorkerError("ValueError: bad", role="worker", rank=1, node_id="n1", remote_traceback="Traceback: x")
    peer = WorkerError("UnavailableError: gone", role="worker", rank=0, node_id="n0", kind="peer")
    result = SimpleNamespace(status="failed", tasks=[{"role": "worker", "rank": 0, "host": "10.0.0.1"},
                                                      {"role": "worker", "rank": 1, "host": "10.0.0.2"}])
    result.error = TrainingFailedError("run x failed: worker 1: ValueError: bad",
                                       {("worker", 1): root, ("worker", 0): peer})
    return result


def test_a_failed_run_raises_with_where_it_failed_and_its_result():
    result = _failed()
    with pytest.raises(TrainingFailedError) as raised:
        raise_failed(result)
    e = raised.value
    assert e is result.error and e.result is result
    assert (e.rank, e.role, e.node_id, e.host, e.remote_traceback) == (1, "worker", "n1", "10.0.0.2", "Traceback: x")
    assert e.to_json()["rank"] == 1
    back = pickle.loads(pickle.dumps(e))  # (the Result travels with it)
    assert back.result.tasks == result.tasks and back.host == "10.0.0.2" and list(back.failures) == list(e.failures)
    ok = SimpleNamespace(status="succeeded", error=None)
    assert raise_failed(ok) is ok
    bare = TrainingFailedError("interrupted")
    assert (bare.rank, bare.role, bare.host, bare.remote_traceback) == (-1, "", "", "")


def test_ray_train_scaling_config_as_raytf_settings():
    ray_default = SimpleNamespace(num_workers=2, use_gpu=False, resources_per_worker=None, placement_strategy="PACK")
    out, warnings = scaling_overrides(ray_default)
    assert out == {"cluster.num_workers": 2, "cluster.worker.cpus": 1.0, "cluster.worker.gpus": 0.0,
                   "cluster.worker.memory_gb": None, "cluster.worker.custom": {},
                   "cluster.placement_strategy": "PACK"} and warnings == []
    # As Ray Train 2.60 reads it: use_gpu alone is {"GPU": 1} and no CPU; zeros dropped; memory in bytes.
    assert resources(SimpleNamespace(use_gpu=True, resources_per_worker=None)) == {"GPU": 1.0}
    gpu, _ = scaling_overrides(SimpleNamespace(num_workers=(1, 3), use_gpu=True, placement_strategy="STRICT_SPREAD",
                                               resources_per_worker={"CPU": 2, "memory": 4e9, "accel": 1, "TPU": 0},
                                               accelerator_type="A100", elastic_resize_monitor_interval_s=15.0,
                                               label_selector={"zone": "a"}))
    assert (gpu["cluster.num_workers"], gpu["cluster.min_workers"], gpu["cluster.elastic.grow_check_s"]) == (3, 1, 15)
    assert (gpu["cluster.worker.cpus"], gpu["cluster.worker.gpus"], gpu["cluster.worker.memory_gb"]) == (2, 1, 4)
    assert gpu["cluster.worker.custom"] == {"accel": 1.0, "accelerator_type:A100": 0.001}
    assert gpu["cluster.placement_strategy"] == "STRICT_SPREAD"
    _, warned = scaling_overrides(SimpleNamespace(num_workers=1, label_selector={"zone": "a"}))
    assert len(warned) == 1 and "label_selector" in warned[0]
    with pytest.raises(ConfigError, match="local mode"):
        scaling_overrides(SimpleNamespace(num_workers=0))
    assert scaling_overrides(None) == ({"cluster.num_workers": 1}, [])
    # Every mapped value is one raytf takes.
    raytf.load_config(ROOT / "conf/local.yaml", {**gpu, "cluster.placement_strategy": "PACK"})


def test_ray_train_run_config_as_raytf_settings():
    run = SimpleNamespace(name="exp", storage_path="s3://bucket/runs", storage_filesystem=None,
                          worker_runtime_env={"env_vars": {"A": "1"}},
                          checkpoint_config=SimpleNamespace(num_to_keep=2, checkpoint_score_attribute="val_loss"),
                          failure_config=SimpleNamespace(max_failures=3, max_preemption_failures=-1),
                          callbacks=[], logging_config=SimpleNamespace(log_level="INFO"))
    out, warnings = run_overrides(run)
    assert out == {"run.name": "exp", "storage.path": "s3://bucket/runs", "ray.runtime_env": {"env_vars": {"A": "1"}},
                   "checkpoint.keep_last": 2, "failure.max_failures": 3, "failure.retry_user_errors": True}
    assert len(warnings) == 1 and "checkpoint_score_attribute" in warnings[0]
    ray_defaults = SimpleNamespace(storage_path="/home/u/ray_results", checkpoint_config=SimpleNamespace(
        num_to_keep=None), failure_config=SimpleNamespace(max_failures=0), logging_config=SimpleNamespace(
        log_level="DEBUG"))
    out, warnings = run_overrides(ray_defaults)
    assert (out["checkpoint.keep_last"], out["failure.max_failures"], out["failure.retry_user_errors"]) == (0, 0, False)
    assert "run.name" not in out and len(warnings) == 1 and "log_level" in warnings[0]
    with pytest.raises(ConfigError, match="storage_filesystem"):
        run_overrides(SimpleNamespace(storage_filesystem=object()))
    raytf.load_config(ROOT / "conf/local.yaml", run_overrides(run)[0])
    # Preemptions are counted apart in both: Ray's limit is raytf's; the settings raytf has no use for are warned of.
    preempt = SimpleNamespace(failure_config=SimpleNamespace(max_failures=1, max_preemption_failures=5,
                                                             preemption_grace_s=30.0))
    out, warnings = run_overrides(preempt)
    assert out["failure.max_preemptions"] == 5
    assert len(warnings) == 1 and "preemption_grace_s" in warnings[0] and "saves at once" in warnings[0]
    raytf.load_config(ROOT / "conf/local.yaml", out)


def test_a_workers_local_and_node_ranks_from_the_cluster_spec():
    workers = ["10.0.0.1:2000", "10.0.0.1:2001", "10.0.0.2:2000", "10.0.0.1:2002"]
    assert [local_ranks(workers, i) for i in range(4)] == [(0, 3, 0), (1, 3, 0), (0, 1, 1), (2, 3, 0)]
    assert local_ranks(["127.0.0.1:1", "127.0.0.1:2"], 1) == (1, 2, 0)
