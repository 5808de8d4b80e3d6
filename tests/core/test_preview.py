"""A launch's plan before anything starts (`--dry-run`, `raytf.plan`): the tasks, their bundles against the
cluster's nodes, the ports, the TF cluster spec's shape, and the one line a launch would fail with. Pure."""

import subprocess
import sys

import pytest

from raytf._core.preview import Cluster, preview
from raytf.config import load_config
from tests.conftest import ROOT

EMBEDDED_2CPU = Cluster("an embedded Ray on this machine", ({"CPU": 2.0},), embedded=True, unchecked=("memory",))


def _cfg(conf="conf/local.yaml", *overrides):
    return load_config(ROOT / conf, list(overrides))


def test_two_workers_on_two_cpus_fit_and_nothing_is_wrong():
    p = preview(_cfg(), EMBEDDED_2CPU)
    assert p.ok and p.problem == ""
    assert [(t.role, t.index, t.rank, t.bundle) for t in p.tasks] == [("worker", 0, 0, {"CPU": 1.0}),
                                                                     ("worker", 1, 1, {"CPU": 1.0})]
    assert p.need == {"CPU": 2.0} and p.have == {"CPU": 2.0}
    assert p.cluster_spec == {"worker": ["<worker0 host>:<port>", "<worker1 host>:<port>"]}
    text = p.text()
    assert "function: examples.keras_cnn:train" in text and "not checked before Ray starts: memory" in text
    assert text.endswith("ok: nothing was reserved or started (drop --dry-run to launch)")
    assert [r["bundle"] for r in p.rows()] == ["{CPU: 1}", "{CPU: 1}"]


def test_too_many_cpus_on_an_embedded_ray_is_the_launchs_own_line():
    p = preview(_cfg("conf/local.yaml", "cluster.num_workers=3"), EMBEDDED_2CPU)
    assert p.problem.startswith("placement group for 3 tasks (PACK) can never be placed on this embedded Ray: "
                                "the cluster lacks {CPU: 1} (needs {CPU: 3} in all, has {CPU: 2}). Fix: ")
    assert p.text().endswith(f"cannot launch: {p.problem}") and "\n" not in p.problem
    # Nothing frees up on an embedded Ray by waiting: no longer wait is advised (raytf issue 54).
    assert "placement_timeout_s" not in p.problem and "ray.num_cpus=N" in p.problem


def test_an_embedded_rays_placement_error_never_advises_a_longer_wait():
    from raytf._core.plan import placement_fix

    assert "placement_timeout_s" not in placement_fix(embedded=True)
    assert "raise cluster.placement_timeout_s" in placement_fix(embedded=False)


def test_a_cluster_as_it_is_now_names_the_autoscaler_wait():
    nodes = Cluster("the Ray cluster at 198.18.0.2:6379", ({"CPU": 4.0}, {"CPU": 4.0}), embedded=False)
    p = preview(_cfg("conf/local.yaml", "cluster.worker.gpus=1"), nodes)
    assert ("cannot be placed on the Ray cluster at 198.18.0.2:6379 as it is now: the cluster lacks {GPU: 2}"
            in p.problem)
    assert "cluster.placement_timeout_s=" in p.problem


def test_strict_spread_needs_distinct_nodes():
    one_big = Cluster("the Ray cluster at x:1", ({"CPU": 8.0},), embedded=False)
    p = preview(_cfg("conf/local.yaml", "cluster.placement_strategy=STRICT_SPREAD"), one_big)
    assert "STRICT_SPREAD needs 2 distinct nodes that can each hold a bundle, the cluster has 1" in p.problem
    assert "at most 1 on one host" not in p.ports  # (no port range: the OS picks)
    two = Cluster("the Ray cluster at x:1", ({"CPU": 1.0}, {"CPU": 1.0}), embedded=False)
    assert preview(_cfg("conf/local.yaml", "cluster.placement_strategy=STRICT_SPREAD"), two).ok


def test_custom_resources_and_a_bundle_no_node_holds():
    nodes = Cluster("c", ({"CPU": 2.0}, {"CPU": 2.0, "accel": 1.0}), embedded=False)
    p = preview(_cfg("conf/local.yaml", "cluster.worker.custom={accel: 1}"), nodes)
    assert "the cluster lacks {accel: 1}" in p.problem
    p = preview(_cfg("conf/local.yaml", "cluster.worker.cpus=2.5"), Cluster("c", ({"CPU": 4.0}, {"CPU": 4.0}),
                                                                          embedded=False))
    assert "no single node can hold" not in p.problem and p.ok
    p = preview(_cfg("conf/local.yaml", "cluster.worker.cpus=3"), Cluster("c", ({"CPU": 2.0},) * 3, embedded=False))
    assert "no single node can hold a bundle of {CPU: 3}" in p.problem


def test_parameter_server_roles_what_each_runs_and_the_spec():
    p = preview(_cfg("conf/ps_local.yaml"), Cluster("c", ({"CPU": 16.0},), embedded=False))
    runs = {f"{t.role}{t.index}": t.runs for t in p.tasks}
    assert runs["chief0"].startswith("function: ") and runs["ps0"] == "a TF server (tf.distribute.Server)"
    assert runs["worker0"] == "a TF server (tf.distribute.Server)"
    assert list(p.cluster_spec) == ["chief", "worker", "ps"]
    assert [t.rank for t in p.tasks] == list(range(len(p.tasks)))


def test_ports_of_a_range_and_how_many_may_share_a_host():
    p = preview(_cfg("conf/local.yaml", "cluster.port_range=[20000,20009]"), EMBEDDED_2CPU)
    assert p.ports == "2 TF server(s) in cluster.port_range [20000, 20009] (10 ports): at most 2 on one host"
    assert p.cluster_spec["worker"][0] == "<worker0 host>:<20000-20009>"


def test_single_task_strategy_has_no_tf_config_and_no_server():
    p = preview(_cfg("conf/local.yaml", "cluster.strategy=mirrored", "cluster.num_workers=1"), EMBEDDED_2CPU)
    assert p.cluster_spec == {} and p.ports == "none (no TF server)"
    assert "none (a single-task strategy runs without TF_CONFIG)" in p.text()


def test_script_and_module_modes_say_what_runs():
    p = preview(_cfg("conf/local.yaml", "train.entrypoint=null", "train.script=examples/mwms_script.py",
                     "train.args=[--epochs,2]"),
                EMBEDDED_2CPU)
    assert p.tasks[0].runs == "script: examples/mwms_script.py --epochs 2"
    p = preview(_cfg("conf/local.yaml", "train.entrypoint=null", "train.module=examples.mwms_script"), EMBEDDED_2CPU)
    assert p.tasks[0].runs == "module: python -m examples.mwms_script"


def test_elastic_only_the_smallest_size_must_fit():
    cfg = _cfg("conf/local.yaml", "cluster.num_workers=4", "cluster.min_workers=2")
    p = preview(cfg, EMBEDDED_2CPU)
    assert p.ok and p.sizes == (4, 3, 2)
    assert "elastic: 4 -> 3 -> 2 workers, largest first" in p.text()
    assert any("would start smaller and grow" in n for n in p.notes)
    assert "3 tasks" in preview(_cfg("conf/local.yaml", "cluster.num_workers=4", "cluster.min_workers=3"),
                                EMBEDDED_2CPU).problem


@pytest.mark.timeout(120)
def test_cli_dry_run_exits_0_or_2_with_one_line_and_starts_no_ray(tmp_path):
    def run(*overrides):
        return subprocess.run([sys.executable, "-m", "raytf.launch", "conf/local.yaml", "--dry-run",
                               f"storage.path={tmp_path}", "ray.address=null", *overrides], cwd=ROOT,
                              capture_output=True, text=True, timeout=100)

    ok = run()
    assert ok.returncode == 0, ok.stderr
    assert "plan for run <a new run name>: multi_worker_mirrored, 2 task(s)" in ok.stdout
    assert ok.stdout.rstrip().endswith("ok: nothing was reserved or started (drop --dry-run to launch)")
    bad = run("cluster.num_workers=64")
    assert bad.returncode == 2
    err = [line for line in bad.stderr.splitlines() if line.strip()]
    assert len(err) == 1 and err[0].startswith("raytf: placement group for 64 tasks (PACK) can never be placed")
    assert "Traceback" not in bad.stderr and "cannot launch" not in bad.stdout
    assert not any(tmp_path.iterdir())  # no run directory: nothing was written
    port = run("cluster.port_range=[20000,20000]")
    assert port.returncode == 2 and port.stderr.startswith("raytf: config error: cluster.port_range ([20000, 20000])")


def test_512_workers_on_64_nodes_and_one_more_than_fits():
    """The plan at the size users reach raytf for (issue 38): every rank, its bundle and its place in the spec."""
    nodes = Cluster("the Ray cluster at x:1", tuple({"CPU": 8.0} for _ in range(64)), embedded=False)
    p = preview(_cfg("conf/local.yaml", "cluster.num_workers=512", "cluster.placement_strategy=SPREAD"), nodes)
    assert p.ok, p.problem
    assert [t.rank for t in p.tasks] == list(range(512)) and p.need == {"CPU": 512.0}
    assert len(p.cluster_spec["worker"]) == 512 and p.cluster_spec["worker"][511] == "<worker511 host>:<port>"
    assert len(p.rows()) == 512
    over = preview(_cfg("conf/local.yaml", "cluster.num_workers=513", "cluster.placement_strategy=SPREAD"), nodes)
    assert "the cluster lacks {CPU: 1}" in over.problem and "\n" not in over.problem
