"""One writer per run directory (raytf/_storage/claim.py, raytf issue 71): a second launch of a running run.name is
refused naming the first; a dead launch's claim is taken over. No Ray: the claim is storage's alone."""

import json
import logging
import os
import subprocess
import sys

import pytest

from raytf._storage import RunDir
from raytf._storage.claim import CLAIM_FILE, STALE_S, Claim, Claimant, gone
from raytf.errors import ConfigError


def test_a_second_claim_is_refused_naming_the_first_and_free_again_once_released(tmp_path):
    first = Claim(RunDir(str(tmp_path), "exp"))
    first.take()
    try:
        with pytest.raises(ConfigError) as info:
            Claim(RunDir(str(tmp_path), "exp")).take()
        msg = str(info.value)
        assert f"run.name ('exp'): another launch is running it (host {first.me.host}, pid {os.getpid()}, since " in msg
        assert "run.name=exp-2" in msg and "\n" not in msg
    finally:
        first.release()
    assert sorted(p.name for p in (tmp_path / "exp").iterdir()) == []  # (nothing of the claim is left)
    again = Claim(RunDir(str(tmp_path), "exp"))
    again.take()
    again.release()


def test_a_killed_launchs_claim_is_taken_over_with_a_line(tmp_path, caplog):
    """A launch SIGKILLed holding its claim (its driver killed): the kernel dropped its lock, its file names it."""
    code = (f"from raytf._storage import RunDir; from raytf._storage.claim import Claim; import os, signal; "
            f"Claim(RunDir({str(tmp_path)!r}, 'exp')).take(); os.kill(os.getpid(), signal.SIGKILL)")
    proc = subprocess.run([sys.executable, "-c", code], timeout=60)
    assert proc.returncode == -9
    left = json.loads((tmp_path / "exp" / CLAIM_FILE).read_text())
    with caplog.at_level(logging.WARNING, logger="raytf"):
        claim = Claim(RunDir(str(tmp_path), "exp"))
        claim.take()
    claim.release()
    said = f"taking over the claim of a launch that is gone (host {left['host']}, pid {left['pid']}, since"
    assert said in caplog.text


def _object_store(run_dir: RunDir) -> RunDir:
    run_dir._local = False  # (the object-store path: a claim file, no lock)
    return run_dir


def test_on_an_object_store_a_live_claim_refuses_and_a_stale_one_is_taken_over(tmp_path, caplog):
    first = Claim(_object_store(RunDir(str(tmp_path), "exp")))
    first.take()
    try:
        with pytest.raises(ConfigError, match="another launch is running it"):
            Claim(_object_store(RunDir(str(tmp_path), "exp"))).take()
    finally:
        first._stop.set()  # (its refreshes stop: the claim is left as a killed launch leaves it)
    path = tmp_path / "exp" / CLAIM_FILE
    left = json.loads(path.read_text())
    path.write_text(json.dumps({**left, "host": "elsewhere", "refreshed_at": left["refreshed_at"] - STALE_S - 1}))
    with caplog.at_level(logging.WARNING, logger="raytf"):
        later = Claim(_object_store(RunDir(str(tmp_path), "exp")))
        later.take()
    assert "taking over the claim of a launch that is gone (host elsewhere" in caplog.text
    assert json.loads(path.read_text())["launch_id"] == later.me.launch_id
    later.release()
    assert not path.exists()


def test_when_a_claim_is_gone():
    holder = Claimant("h", 12, 0.0, 100.0, "x")
    assert gone(holder, 100.0 + STALE_S - 1, "other", alive=lambda pid: True) is None
    assert gone(holder, 100.0 + STALE_S + 1, "other", alive=lambda pid: True) == f"not refreshed for {STALE_S + 1:.0f}s"
    assert gone(holder, 101.0, "h", alive=lambda pid: False) == "its process 12 is gone"
    assert gone(holder, 101.0, "h", alive=lambda pid: True) is None
    assert Claimant.of({"host": "h"}) is None and Claimant.of(None) is None


def test_raytf_runs_shows_a_run_whose_launch_is_gone_as_lost(tmp_path):
    """result.json says running for ever after a killed driver: `raytf runs` tells a live launch from a gone one by
    its claim (raytf issue 71)."""
    from raytf import runs

    (tmp_path / "exp").mkdir()
    (tmp_path / "exp" / "result.json").write_text(json.dumps({"run": "exp", "status": "running", "attempts": []}))
    assert [r["status"] for r in runs.ls(str(tmp_path))] == ["lost"]  # (no launch ever claimed it: lost too)
    claim = Claim(RunDir(str(tmp_path), "exp"))
    claim.take()
    try:
        assert [r["status"] for r in runs.ls(str(tmp_path))] == ["running"]
    finally:
        claim.release()
    assert [r["status"] for r in runs.ls(str(tmp_path))] == ["lost"]
