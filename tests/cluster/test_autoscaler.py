"""A cluster with an autoscaler (Ray's fake multi-node provider, tests/autoscaling.py): a run that scales it up from
no worker node, and one no node type can hold, refused in one line instead of waiting (raytf issue 52). Each run is
the CLI's, as on a cluster (its own process, the cluster's token)."""

import json
import subprocess
import sys

import pytest

from tests.autoscaling import FakeAutoscaler
from tests.conftest import ROOT

pytestmark = [pytest.mark.ray, pytest.mark.timeout(300), pytest.mark.slow]


@pytest.fixture(scope="module")
def autoscaling():
    """A head without CPUs; the autoscaler may add one node of 2 CPUs."""
    cluster = FakeAutoscaler({"cpu2": {"resources": {"CPU": 2}, "max_workers": 1}}).start()
    yield cluster
    cluster.stop()


def _launch(cluster: FakeAutoscaler, tmp_path, *overrides: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "raytf.launch", "conf/local.yaml", f"ray.address={cluster.address}",
         f"storage.path={tmp_path}", "ray.ship_code=off", "checkpoint.export_model=false", "cluster.standby=0",
         "train.epochs=1", "train.steps_per_epoch=4", "train.entrypoint=tests.train_fns:paced_loop",
         "train.params.step_s=0", *overrides],
        cwd=ROOT, env=cluster.env(), capture_output=True, text=True, timeout=240)


def test_a_run_scales_the_cluster_up_from_no_worker_node(autoscaling, tmp_path):
    proc = _launch(autoscaling, tmp_path, "run.name=scaled")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    summary = json.loads((tmp_path / "scaled" / "result.json").read_text())
    assert summary["status"] == "succeeded" and len(summary["tasks"]) == 2
    # On the node the autoscaler added (the head has no CPU): both workers, one placement group PACKed on it.
    assert len({t["node_id"] for t in summary["tasks"]}) == 1


def test_a_request_no_node_type_can_hold_fails_in_one_line_without_waiting(autoscaling, tmp_path):
    # (Were the autoscaler's verdict missed, the run would wait the 600 s given, past this test's timeout.)
    proc = _launch(autoscaling, tmp_path, "run.name=gpu", "cluster.worker.gpus=1",
                   "cluster.placement_timeout_s=600")
    assert proc.returncode != 0
    out = proc.stdout + proc.stderr
    assert ("placement group for 2 tasks (PACK) can never be placed on this cluster: its autoscaler can add no node "
            "that can hold a bundle of {CPU: 1, GPU: 1}") in out, out[-3000:]
    assert "Traceback" not in out and "_group_" not in out, out[-3000:]
