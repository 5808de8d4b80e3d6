"""Nothing left in the temporary directory by a run, a killed task, its retry or a standby (raytf issue 33): each
task process's temporary directory is a scratch directory it owns (raytf/_task/scratch.py, own_tempdir), swept once
the process is gone, autograph's `__autograph_generated_file*.py` included (TF deletes them only at the
interpreter's exit, which ray.kill skips). The run's Ray is its own, its processes given a temporary directory of
the test's (TMPDIR), so the count is exact whatever else runs on the machine."""

import os
import shutil
import tempfile
from pathlib import Path

import pytest

import raytf
from raytf._core import events as ev
from tests.conftest import ROOT, environ, leftovers

pytestmark = [pytest.mark.ray]


def _entries(tmp: Path) -> list[str]:
    return sorted(os.listdir(tmp))


def _autograph(tmp: Path) -> list[Path]:
    return list(tmp.rglob("__autograph_generated_file*"))


@pytest.mark.slow  # a Ray of its own, two attempts and a standby: ~60 s here
@pytest.mark.timeout(400)
def test_a_run_with_a_killed_worker_and_a_standby_leaves_nothing_in_tmp(session_ray, fast_cfg, monkeypatch):
    import ray

    session_ray.release()
    monkeypatch.chdir(ROOT)  # the tasks import tests.* and examples.* from here
    # Short (the tasks' own temporary directories hold Unix sockets) and the test's own.
    tmp = Path(tempfile.mkdtemp(prefix="rtf-", dir="/tmp"))
    try:
        with environ({"TMPDIR": str(tmp)}):  # (this process's own tempfile.tempdir is already resolved)
            ray.init(address="local", num_cpus=2, include_dashboard=True, configure_logging=False,
                     log_to_driver=False)
        before = _entries(tmp)
        seen: dict[str, int] = {}

        def kill_rank1(e: ev.Event) -> None:
            if e.attempt == 1 and e.rank == 0 and e.kind == ev.STEP and e.payload["step"] >= 4 and not seen:
                seen["autograph_before_the_kill"] = len(_autograph(tmp))
                ray.kill(ray.get_actor("raytf:tmpcount:worker:1"), no_restart=True)

        cfg = fast_cfg("run.name=tmpcount", "train.epochs=2", "metrics.every_steps=1", "cluster.standby=1",
                       "failure.max_failures=2")
        result = raytf.fit(cfg, quiet=True, on_event=kill_rank1)
        assert result.status == "succeeded", result.error
        assert [a["cause"] for a in result.attempts] == ["system", None]
        # The tasks' traced steps left autograph files (in their own temporary directories): the count below
        # could fail.
        assert seen["autograph_before_the_kill"] > 0
        # The run's end asked for a standby (the session's next run would take it); released, as a CLI run's are.
        from raytf._driver import standby

        assert standby.wait_ready(1, 180)
        assert raytf.release_standbys() == 1
        assert leftovers() == {"actors": [], "placement_groups": []}
        assert _autograph(tmp) == []
        left = sorted(str(p.relative_to(tmp)) for p in tmp.rglob("*") if p.parts[len(tmp.parts)] not in before)
        assert _entries(tmp) == before, f"left in {tmp}: {left}"
    finally:
        ray.shutdown()
        shutil.rmtree(tmp, ignore_errors=True)
