"""One lineage per run directory: checkpoint.resume=false on a run.name with checkpoints is refused up front."""

import json
import subprocess
import sys

import pytest

from tests.conftest import ROOT

pytestmark = [pytest.mark.timeout(120)]


def test_resume_false_on_a_run_with_checkpoints_is_refused_before_anything_starts(tmp_path):
    ckpt = tmp_path / "exp1" / "checkpoints" / "ckpt-e000002-s0000000020"
    ckpt.mkdir(parents=True)
    (ckpt / "_COMMITTED.json").write_text(json.dumps({"epoch": 2, "step": 20}))
    proc = subprocess.run([sys.executable, "-m", "raytf.launch", "conf/local.yaml", "run.name=exp1",
                           f"storage.path={tmp_path}", "checkpoint.resume=false"],
                          cwd=ROOT, capture_output=True, text=True, timeout=100)
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = [line for line in proc.stderr.splitlines() if line.startswith("raytf:")]
    assert len(lines) == 1 and "checkpoint.resume=false" in lines[0] and "1 checkpoint(s)" in lines[0], lines
    assert "Traceback" not in proc.stderr
    assert sorted(p.name for p in (tmp_path / "exp1").iterdir()) == ["checkpoints"]  # nothing written
