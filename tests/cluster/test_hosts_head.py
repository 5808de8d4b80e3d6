"""The Ray head's host lost (tests/hosts.py): the driver, on a host of its own, ends the run in one line.

A module of its own: this test needs a bed of its own (it loses its head), and one bed at a time holds the
machine (tests/hosts.py's lock), so another module's bed must be gone first."""

import time

import pytest

from tests import hosts
from tests.cluster import hostrun

# CI's second step (-m slow), as every host-bed test: each starts 3-5 Ray nodes (~40 s a test).
pytestmark = [pytest.mark.timeout(600), pytest.mark.slow]


def test_head_host_lost_the_driver_ends_in_one_line(tmp_path):
    """The driver on a host of its own; the Ray head's host (GCS) is killed mid-run. Without the GCS a Ray cluster
    is gone (its nodes exit once they cannot reach it): the run ends as failed, saying so, not with a traceback
    or a hang."""
    # Ray's nodes and drivers give a silent GCS 60 s (gcs_rpc_server_reconnect_timeout_s) before they end, and
    # raytf's driver half of that (failure.head_lost_after): 10 s here, the same path ~75 s sooner (the driver
    # gives up after 5 s, its hosts' nodes go after 10; CI's second step, issues 31 and 50), and the driver's
    # reading of that variable tested along.
    gcs_timeout = {"RAY_gcs_rpc_server_reconnect_timeout_s": "10"}
    for bed in hosts.bed_for_tests([0, 2, 2], env=gcs_timeout):  # a bed of its own: this one loses its head
        run = hostrun.Launch(bed, tmp_path, "headless", "cluster.placement_strategy=SPREAD", "train.epochs=40",
                     "train.steps_per_epoch=10", "train.params.step_s=0.2", on=bed.hosts[1])
        with run:
            run.wait_for_workers(2)
            run.wait_for_commit()
            lost_at = time.monotonic()
            bed.kill_host(bed.head)
            code, result = run.finish(timeout_s=240)
            ended_after = time.monotonic() - lost_at
        print(f"head host lost -> the driver ended after {ended_after:.1f}s")
        assert code == 1, run.output()
        assert result["status"] == "failed" and result["attempts"][-1]["cause"] == "head_lost"
        assert "lost the Ray head" in result["error"]["message"]
        assert "not answered for 5s" in result["error"]["message"]  # half the bed's 10 s, not of Ray's 60 s
        assert "Traceback" not in run.output()
        last = [line for line in run.lines if line.strip()][-1]
        assert "Ray head" in last and bed.address in last, last
        # Its hosts' Ray nodes go too (they exit without a GCS): nothing of the run is left behind.
        for h in bed.hosts[1:]:
            assert bed.wait_gone(h, r"^ray::", timeout_s=120) == []
