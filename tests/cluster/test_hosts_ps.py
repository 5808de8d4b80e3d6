"""conf/two_node_ps.yaml on the host bed: the chief beside the driver on the head, the ps and the workers on hosts
of their own (custom resources pin each role to its hosts).

A worker's host cut off: TF's ClusterCoordinator reschedules a lost worker's functions only once a call to it
fails, and a call in flight to a host that is cut off never fails (no deadline, no gRPC keepalive in TF's runtime;
a killed worker process, tests/ray/test_ps_local.py, refuses the connection and is tolerated). So once Ray
declares the host dead, raytf restarts the attempt from the last commit instead of waiting out
failure.hang_timeout_s. The ps host cut off: the variables are gone; the attempt restarts on the spare ps host."""

import json
import time

import pytest

from tests import hosts
from tests.cluster import hostrun

pytestmark = [pytest.mark.timeout(600), pytest.mark.slow]


@pytest.fixture(scope="module")
def hostbed():
    # head: driver, chief and a spare worker slot; hosts 1-2: a ps each (one spare); hosts 3-4: a worker each.
    yield from hosts.bed_for_tests([2, 1, 1, 1, 1], resources=[{"chief_slot": 1, "worker_slot": 1}, {"ps_slot": 1},
                                                               {"ps_slot": 1}, {"worker_slot": 1}, {"worker_slot": 1}])


@pytest.fixture
def bed(hostbed):
    return hostbed.ready()  # (a host a fault left is revived for the test that uses it next)


def _launch(bed, tmp_path, name: str) -> hostrun.Launch:
    return hostrun.Launch(bed, tmp_path, name, "cluster.num_ps=1", "cluster.ps.variable_partitioner=none",
                          "cluster.chief.custom.chief_slot=1", "cluster.ps.custom.ps_slot=1",
                          "cluster.worker.custom.worker_slot=1", "train.entrypoint=tests.train_fns:paced_ps",
                          "train.epochs=4", "train.steps_per_epoch=10", "train.params.step_s=0.2",
                          "checkpoint.keep_last=0", "failure.max_failures=2", config="conf/two_node_ps.yaml")


def _cut_after_commit(bed, tmp_path, name: str, role: str):
    """Launch; once a checkpoint is committed, partition the host of a `role` task (not the head's); let the run
    finish; heal. Returns (victim, cut time, exit code, result.json, the Launch)."""
    run = _launch(bed, tmp_path, name)
    victim = None
    try:
        tasks = run.wait_for_tasks(4)
        run.wait_for_commit()
        victim = bed.host_of(next(a for (r, _), a in sorted(tasks.items()) if r == role and a != bed.head.address))
        cut_at = time.time()
        bed.partition(victim)
        code, result = run.finish()
        bed.heal(victim)
        assert bed.wait_gone(victim, r"^ray::TaskActor", timeout_s=60) == []
    finally:
        run.stop()
        if victim is not None:
            bed.heal(victim)
            bed.revive_before_next_use(victim)
    return victim, cut_at, code, result, run


def _epochs(tmp_path, name: str) -> list[int]:
    markers = (tmp_path / name / "checkpoints").glob("*/_COMMITTED.json")
    return sorted(json.loads(p.read_text())["epoch"] for p in markers)


def _assert_restarted_elsewhere(bed, tmp_path, name: str, victim, cut_at: float, code: int, result: dict,
                                run: hostrun.Launch) -> None:
    assert code == 0, run.output()
    assert result["status"] == "succeeded", result["error"]
    first, *rest = result["attempts"]
    assert first["status"] == "failed" and rest and rest[-1]["status"] == "succeeded", result["attempts"]
    assert first["cause"] != "hang"  # raytf saw the loss; it did not wait out failure.hang_timeout_s
    assert rest[0]["resumed_from"] == hostrun.last_commit_before(tmp_path, name, rest[0])
    assert victim.address not in {t["host"] for t in result["tasks"]}
    assert _epochs(tmp_path, name)[-1] == 4
    print(f"{name}: host cut off -> the next attempt's first step: {rest[0]['first_step_at'] - cut_at:.1f}s")
    state = hostrun.cluster_state(bed, name)
    assert (state["alive"], state["placement_groups"]) == ([], [])


def test_worker_host_partitioned_the_attempt_restarts_without_it(bed, tmp_path):
    victim, cut_at, code, result, run = _cut_after_commit(bed, tmp_path, "pswk", "worker")
    _assert_restarted_elsewhere(bed, tmp_path, "pswk", victim, cut_at, code, result, run)


def test_ps_host_partitioned_the_attempt_restarts_from_the_last_commit(bed, tmp_path):
    victim, cut_at, code, result, run = _cut_after_commit(bed, tmp_path, "psps", "ps")
    _assert_restarted_elsewhere(bed, tmp_path, "psps", victim, cut_at, code, result, run)
