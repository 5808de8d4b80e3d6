"""Elastic training on real hosts (tests/hosts.py: network namespaces, a Ray node each, one CPU per worker host):
a worker's host cut off the network after a commit, and the group goes on with two workers without waiting for
cluster.placement_timeout_s; the host healed, and the group grows back to three at an agreed step. The same
logic on a one-machine cluster, in the default run: tests/cluster/test_elastic.py."""

import time

import pytest

from tests import hosts
from tests.cluster import hostrun

pytestmark = [pytest.mark.timeout(600), pytest.mark.slow]  # ~2 min


@pytest.fixture(scope="module")
def bed():
    # The head (driver, GCS, the event bus) with no CPUs for tasks; three hosts of one worker each. Ray's own
    # health check (~65 s to declare a cut-off node dead), not the beds' quicker one (~25 s): the host must heal
    # while Ray still holds it alive, or its node exits as declared dead and the run ends at two workers before a
    # fresh one is up (a rehearsal under CI's load shrank only after the quicker verdict had come).
    yield from hosts.bed_for_tests([0, 1, 1, 1], quick_verdict=False)


def _wait_for_line(run: hostrun.Launch, text: str, timeout_s: float) -> float:
    """When the driver printed a line containing `text` (the time it was seen)."""
    with run._seen:
        assert run._seen.wait_for(lambda: any(text in line for line in run.lines) or run.proc.poll() is not None,
                                  timeout_s), f"no {text!r} within {timeout_s}s\n{run.output()}"
    assert any(text in line for line in run.lines), run.output()
    return time.time()


def test_partitioned_host_shrinks_then_heals_and_grows_back(bed, tmp_path):
    run = hostrun.Launch(bed, tmp_path, "elastic", "cluster.num_workers=3", "cluster.min_workers=2",
                         "cluster.elastic.wait_s=5", "cluster.elastic.grow_check_s=3", "train.epochs=8",
                         "train.steps_per_epoch=10", "train.params.step_s=0.2", "checkpoint.keep_last=0",
                         "metrics.every_steps=1", "cluster.elastic.keep_global_batch=true", "train.batch_size=4")
    victim = None
    try:
        workers = run.wait_for_workers(3)
        run.wait_for_commit()
        victim = bed.host_of(workers[2])
        partitioned_at = time.time()
        bed.partition(victim)
        shrunk_at = _wait_for_line(run, "2 of 3 workers (shrink)", 120)
        healed_at = time.time()
        bed.heal(victim)
        try:
            grow_seen = _wait_for_line(run, "capacity for the full size is back", 40)
        except AssertionError:  # Ray declared the host dead meanwhile: a fresh node on it (a replacement host)
            bed.revive(victim)
            healed_at = time.time()
            grow_seen = _wait_for_line(run, "capacity for the full size is back", 60)
        code, result = run.finish()
    finally:
        if victim is not None:
            bed.heal(victim)
        run.stop()
    assert code == 0, run.output()
    attempts = result["attempts"]
    assert [a["num_workers"] for a in attempts] == [3, 2, 3], attempts
    assert [a["resize"] for a in attempts] == [None, "shrink", "grow"]
    assert attempts[1]["cause"] == "resize" and attempts[1]["steps_lost"] == 0  # the grow lost no step
    assert attempts[2]["resumed_from"].endswith(f"-s{attempts[1]['last_step']:010d}")
    # No wait for cluster.placement_timeout_s (90 s here) before training on at the smaller size.
    shrink_s = attempts[1]["first_step_at"] - partitioned_at
    grow_s = attempts[2]["first_step_at"] - grow_seen
    assert shrink_s < 90, shrink_s
    back_s = attempts[2]["first_step_at"] - healed_at
    print(f"partition -> training at 2 workers: {shrink_s:.1f}s (the shrink decided after "
          f"{shrunk_at - partitioned_at:.1f}s); heal -> training at 3: {back_s:.1f}s ({grow_s:.1f}s after the grow "
          "was decided)")
    assert result["status"] == "succeeded" and result["final_metrics"]["epoch"] == 8
