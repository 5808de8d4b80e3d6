"""A run against S3 through a network that drops connections (raytf issue 33): the S3 test server behind
tests/faultproxy.py, which resets a share of the connections (at accept and mid-response) and, for a while, all of
them, while a worker is killed. The run succeeds, and every checkpoint committed is whole: its files match the
SHA-256 manifest in its _COMMITTED.json."""

import pytest

import raytf
from raytf._core import events as ev
from raytf._storage import RunDir
from tests.faultproxy import FaultProxy
from tests.ray.test_s3_storage import cfg_for, s3, s3fs  # noqa: F401 (s3: the module's endpoint fixture)

pytestmark = [pytest.mark.ray, pytest.mark.timeout(900)]


@pytest.mark.slow  # a fault scenario, two attempts on S3 (~60 s here)
def test_a_run_through_resets_an_outage_and_a_killed_worker_commits_only_whole_checkpoints(s3, no_leaks):  # noqa: F811
    import ray

    fs = s3fs(s3)
    fs.create_dir("faults")
    with FaultProxy(("127.0.0.1", s3.port), reset_share=0.08, mid_response_share=0.5, seed=3) as proxy:
        done: dict[str, int] = {}

        def chaos(e: ev.Event) -> None:
            if e.kind != ev.STEP or e.rank != 0 or e.attempt != 1:
                return
            if e.payload["step"] >= 6 and "outage" not in done:
                done["outage"] = e.payload["step"]
                proxy.outage(4.0)  # every connection, for 4 s: those open reset mid-transfer, new ones at accept
            elif "outage" in done and "kill" not in done and not proxy.down and e.payload["step"] > done["outage"] + 9:
                done["kill"] = e.payload["step"]
                ray.kill(ray.get_actor("raytf:faults:worker:1"), no_restart=True)

        # 80 steps: the kill comes at step ~16-25 (after the outage), and attempt 2 trains through ~6 more commits
        # against the resets (it was 200 steps, and an exported model nothing here looks at: ~40 s of CI's second
        # step).
        cfg = cfg_for(proxy, "faults", "run.name=faults", "train.epochs=2", "train.steps_per_epoch=40",
                      "checkpoint.export_model=false",
                      "checkpoint.every_steps=10", "checkpoint.keep_last=0", "metrics.every_steps=1",
                      "storage.upload_retries=8", "storage.upload_backoff_s=0.5", "storage.max_inflight_uploads=2",
                      "failure.max_failures=4")
        result = raytf.fit(cfg, quiet=True, on_event=chaos)
        stats = proxy.stats
    assert set(done) == {"outage", "kill"}, done  # (the kill: once the outage is over, in attempt 1)
    assert result.status == "succeeded", result.error
    assert any(a["cause"] == "system" and a["rank"] == 1 for a in result.attempts), result.attempts
    # The faults happened: connections reset at accept, mid-response, and by the outage.
    assert stats.reset_at_accept > 0 and stats.reset_mid_response > 0, stats
    # Read back directly (not through the proxy): every committed checkpoint matches its manifest, none is partial
    # where a commit marker says whole, and the last epoch's is there.
    direct = cfg_for(s3, "faults").storage
    run_dir = RunDir(direct, "faults")
    entries = run_dir.checkpoints.list()
    committed = [e for e in entries if e.committed]
    assert committed and committed[-1].epoch == 2, [e.name for e in entries]
    assert {e.name: run_dir.checkpoints.verify(e) for e in committed} == {e.name: None for e in committed}
