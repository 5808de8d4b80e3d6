"""`python -m raytf.runs`: show a run's summary whatever it lacks, and name the directory a missing run was
looked for in (exit 2). Pure: fake run directories, no Ray, no TensorFlow."""

import json
import os
import subprocess
import sys

from raytf import _storage as storage
from raytf import runs
from raytf.config import load_config, redacted, to_yaml
from tests.conftest import ROOT


def _fake_run(storage_dir, name="exp1", **summary):
    run = storage_dir / name
    run.mkdir(parents=True)
    cfg = load_config({"train": {"entrypoint": "examples.keras_cnn:train"}},
                      [f"storage.path={storage_dir}", f"run.name={name}"])
    (run / storage.CONFIG_FILE).write_text(to_yaml(redacted(cfg)))
    base = {"run": name, "status": "succeeded", "strategy": "multi_worker_mirrored", "roles": {"worker": 2},
            "final_metrics": {"loss": 0.25}, "last_checkpoint": None, "resumed_from": None,
            "duration_s": 12.5, "first_step_s": None,
            "tasks": [{"role": "worker", "rank": 0, "node_id": "abc", "address": "127.0.0.1:1"}],
            "attempts": [{"attempt": 0, "status": "succeeded"}]}
    (run / storage.RESULT_FILE).write_text(json.dumps({**base, **summary}))
    return run


def test_show_prints_a_dash_for_what_a_run_lacks(tmp_path, capsys):
    _fake_run(tmp_path / "runs")
    assert runs.main(["show", "exp1", "--storage", str(tmp_path / "runs")]) == 0
    out = capsys.readouterr().out
    timings = next(ln for ln in out.splitlines() if ln.startswith("timings"))
    assert "first step -" in timings and "duration 12.5s" in timings
    assert "None" not in out
    assert "loss=0.25" in out and "task worker" in out


def test_show_of_a_run_still_going_without_timings(tmp_path, capsys):
    run = _fake_run(tmp_path / "runs", status="running", duration_s=None, first_step_s=3.25)
    assert runs.main(["show", str(run)]) == 0
    out = capsys.readouterr().out
    assert "duration -   first step 3.25s" in out


def test_show_of_a_missing_run_names_the_directory_and_the_fix(tmp_path, capsys):
    _fake_run(tmp_path / "runs")
    assert runs.main(["show", "exp2", "--storage", str(tmp_path / "runs")]) == 2
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert os.path.join(str(tmp_path / "runs"), "exp2") in lines[0] and "no such directory" in lines[0]
    assert f"python -m raytf.runs ls {tmp_path / 'runs'}" in lines[0]


def test_a_directory_without_result_json_is_not_a_run(tmp_path, capsys):
    (tmp_path / "runs" / "half").mkdir(parents=True)
    assert runs.main(["plot", "half", "--storage", str(tmp_path / "runs")]) == 2
    assert "no result.json in it" in capsys.readouterr().err


def test_cli_missing_run_exits_2_with_one_line(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "raytf.runs", "show", "nope", "--storage", str(tmp_path)],
                          cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith(f"raytf.runs: no run at {tmp_path}/nope"), proc.stderr


def test_run_path_keeps_the_storage_query():
    assert runs._run_path("exp1", "s3://b/runs?endpoint_override=h:9&scheme=http") == \
        "s3://b/runs/exp1?endpoint_override=h:9&scheme=http"
    assert runs._run_path("exp1", "./runs") == "./runs/exp1"
    assert runs._run_path("/abs/runs/exp1", "./runs") == "/abs/runs/exp1"
