"""`python -m raytf.runs`: show a run's summary whatever it lacks, and name the directory a missing run was
looked for in (exit 2). Pure: fake run directories, no Ray, no TensorFlow."""

import json
import os
import subprocess
import sys

from raytf import _storage as storage
from raytf import runs
from raytf._core.breakdown import BREAKDOWN
from raytf._core.metrics import rows_to_arrow
from raytf.config import load_config, redacted, to_yaml
from tests.conftest import ROOT


def _fake_run(storage_dir, name="exp1", metrics=None, **summary):
    """A run directory as a launch leaves it: config.yaml, result.json (`summary` over a default), and
    metrics.parquet when `metrics` (rows as the driver's table holds them) are given."""
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
    if metrics is not None:
        import pyarrow.parquet as pq

        pq.write_table(rows_to_arrow(metrics), str(run / storage.METRICS_FILE))
    return run


def test_show_prints_a_dash_for_what_a_run_lacks(tmp_path, capsys):
    _fake_run(tmp_path / "runs")
    assert runs.main(["show", "exp1", "--storage", str(tmp_path / "runs")]) == 0
    out = capsys.readouterr().out
    timings = next(ln for ln in out.splitlines() if ln.startswith("timings"))
    assert "first step -" in timings and "duration 12.5s" in timings
    assert "None" not in out
    assert "loss=0.25" in out and "task worker" in out


def test_show_names_the_mlflow_run_of_a_tracked_run(tmp_path, capsys):
    _fake_run(tmp_path / "runs", mlflow_run_id="8be80ecedafa4c8481ea18a5178f69f8")
    _fake_run(tmp_path / "runs", name="exp2")
    assert runs.main(["show", "exp1", "--storage", str(tmp_path / "runs")]) == 0
    assert "mlflow     run 8be80ecedafa4c8481ea18a5178f69f8" in capsys.readouterr().out.splitlines()
    assert runs.main(["show", "exp2", "--storage", str(tmp_path / "runs")]) == 0
    assert not [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("mlflow")]


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


def _step_rows(attempt=0, step_times=((0.12, 0.12, 0.1), (0.3, 0.2, 0.25)), time0=100.0):
    """Two workers' step rows: worker 0 all parts measured, worker 1 without its collective (not measurable)."""
    rows = []
    for rank, times in enumerate(step_times):
        for i, st in enumerate(times):
            parts = {"step_time_s": st, "input_wait_s": st / 4, "save_s": 0.0, "compute_s": st / 2}
            if rank == 0:
                parts["collective_s"] = st / 4
            rows.append({"run": "exp1", "attempt": attempt, "rank": rank, "role": "worker", "kind": "step",
                         "epoch": 1, "step": 1 + 10 * i, "time": time0 + i + rank / 10, "fit": 1, "num_workers": 2,
                         "loss": 1.0, "steps_per_s": 1 / st, **parts})
    return rows


def _before_the_breakdown(rows):
    """The rows as a raytf before the breakdown wrote them (steps_per_s, but no step_time_s and its parts)."""
    return [{k: v for k, v in r.items() if k not in BREAKDOWN} for r in rows]


TASKS = [{"role": "worker", "rank": r, "node_id": "abc", "host": f"10.0.0.{r + 1}", "address": f"10.0.0.{r + 1}:1"}
         for r in (0, 1)]
STRAGGLER = {"rank": 1, "role": "worker", "host": "10.0.0.2", "part": "input", "value_s": 0.0625,
             "others_s": 0.03, "ratio": 2.08, "attempt": 0, "step": 11, "last_step": 21}


def _show(tmp_path, capsys, **summary):
    _fake_run(tmp_path / "runs", **summary)
    assert runs.main(["show", "exp1", "--storage", str(tmp_path / "runs")]) == 0
    out = capsys.readouterr().out
    return out.splitlines()[out.splitlines().index(next(ln for ln in out.splitlines() if ln.startswith("breakdown"))):]


def test_show_ends_with_each_ranks_breakdown_the_slowest_and_the_stragglers(tmp_path, capsys):
    lines = _show(tmp_path, capsys, metrics=_step_rows(), tasks=TASKS, stragglers=[STRAGGLER])
    assert lines[0] == "breakdown  attempt 0, per rank: medians, ms per step"
    header, w0, w1 = (ln.split() for ln in lines[1:4])
    assert header == ["role", "rank", "host", "steps", "step", "input", "collective", "save", "compute", "input",
                      "%"]
    assert w0 == ["worker", "0", "10.0.0.1", "21", "120.0", "30.0", "30.0", "0.0", "60.0", "25.0"]
    assert w1 == ["worker", "1", "10.0.0.2", "21", "250.0", "62.5", "-", "0.0", "125.0", "25.0"]
    assert len({len(ln) for ln in lines[1:4]}) == 1  # aligned
    assert lines[4] == "slowest: worker 1 (250.0 ms/step: the rank the others wait for)"
    assert lines[5:] == ["stragglers:", "  worker 1 on 10.0.0.2: input 2.08x the others' (62.5 vs 30.0 ms/step), "
                                        "steps 11-21 of attempt 0"]


def test_show_says_when_there_are_no_stragglers_or_no_breakdown(tmp_path, capsys):
    rows = [r | ({"gpu0_util": 40.0 + r["step"]} if r["rank"] == 0 else {}) for r in _step_rows()]
    lines = _show(tmp_path, capsys, metrics=rows, stragglers=[])
    assert lines[-1] == "stragglers: none" and lines[-2].startswith("slowest: worker 1")
    assert lines[1].endswith("gpu %") and [ln.split()[-1] for ln in lines[2:4]] == ["51.0", "-"]
    # The default summary's tasks: worker 0 with an address but no host (an older result.json), no worker 1.
    assert [ln.split()[2] for ln in lines[2:4]] == ["127.0.0.1", "-"]
    old = _before_the_breakdown(_step_rows())
    assert _show(tmp_path / "old", capsys, metrics=old) == [
        "breakdown  none: its step rows have no step-time breakdown (made by an older raytf)"]


def test_plot_ranks_writes_a_png_of_each_ranks_step_time(tmp_path, capsys, monkeypatch):
    from raytf.api.plots import plot

    run = _fake_run(tmp_path / "runs", metrics=_step_rows(0) + _step_rows(1, time0=200.0))
    monkeypatch.chdir(tmp_path)
    assert runs.main(["plot", "exp1", "--ranks", "--storage", str(tmp_path / "runs")]) == 0
    assert capsys.readouterr().out.strip() == "exp1_ranks.png"
    assert (tmp_path / "exp1_ranks.png").read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
    fig = plot(str(run), ranks=True)
    ax, _ = fig.axes  # step time above; own time and input wait below
    assert sorted(ln.get_label() for ln in ax.lines if not ln.get_label().startswith("_")) == ["worker 0", "worker 1"]
    assert [t.get_text().strip() for t in ax.texts] == ["attempt 1"]


def test_plot_ranks_of_a_run_without_the_breakdown_says_why(tmp_path, capsys):
    old = _before_the_breakdown(_step_rows())
    _fake_run(tmp_path / "runs", metrics=old)
    assert runs.main(["plot", "exp1", "--ranks", "--storage", str(tmp_path / "runs"), "-o",
                      str(tmp_path / "x.png")]) == 1
    assert "made by an older raytf" in capsys.readouterr().err and not (tmp_path / "x.png").exists()


def test_result_breakdown_is_the_per_rank_table(tmp_path):
    from raytf.api.result import load_result

    run = _fake_run(tmp_path / "runs", metrics=_step_rows(0) + _step_rows(1, step_times=((0.5,), (0.7,))),
                    tasks=TASKS, attempts=[{"attempt": 0, "status": "failed"}, {"attempt": 1, "status": "succeeded"}])
    latest = load_result(str(run)).breakdown()
    assert latest["attempt"].tolist() == [1, 1] and latest["step_time_s"].tolist() == [0.5, 0.7]
    assert latest["host"].tolist() == ["10.0.0.1", "10.0.0.2"]
    first = load_result(str(run)).breakdown(attempt=0)
    assert first["step_time_s"].tolist() == [0.12, 0.25] and first["host"].isna().all()  # placed before attempt 1


def test_show_names_no_slowest_rank_when_none_stands_out(tmp_path, capsys):
    """Ranks whose own time a step (step less all-reduce wait) is within 10 % of each other's: none is named."""
    rows = _step_rows(step_times=((0.1, 0.1, 0.1), (0.13, 0.13, 0.13)))
    for r in rows:  # both ranks' all-reduce timed: own times 75 and 78 ms
        r["collective_s"] = r["step_time_s"] / 4 if r["rank"] == 0 else r["step_time_s"] - 0.078
    lines = _show(tmp_path, capsys, metrics=rows, tasks=TASKS, stragglers=[])
    assert lines[4] == ("slowest: none stands out (each rank's own time a step, its all-reduce wait left out, is "
                        "75.0-78.0 ms: within 10 % of the others')")


def test_every_subcommand_takes_the_storage_as_storage(tmp_path, capsys):
    """`ls --storage S` as `show RUN --storage S` and `plot RUN --storage S` (a path given to ls alone, as before,
    still works; two different ones are refused)."""
    _fake_run(tmp_path / "runs", "exp1")
    assert runs.main(["ls", "--storage", str(tmp_path / "runs")]) == 0
    assert "exp1" in capsys.readouterr().out
    assert runs.main(["ls", str(tmp_path / "runs")]) == 0
    assert "exp1" in capsys.readouterr().out
    assert runs.main(["ls", str(tmp_path / "runs"), "--storage", str(tmp_path)]) == 2
    assert "two storage paths" in capsys.readouterr().err
    assert runs.main(["show", "exp1", "--storage", str(tmp_path / "runs")]) == 0
