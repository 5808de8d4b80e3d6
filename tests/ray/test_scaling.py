"""The scaling report (--scaling, as docs/performance.md runs it; raytf.scaling is its API) and the benchmark's smoke
mode."""

import subprocess
import warnings

import pandas as pd
import pytest

import raytf
from tests import documented
from tests.conftest import FAST, ROOT, _quick, benchmark_smoke, state_address


@pytest.mark.slow  # step 2: three runs (~35 s)
@pytest.mark.ray
@pytest.mark.timeout(400)
def test_scaling_report_runs_each_count(tmp_path, no_leaks):
    """docs/performance.md's command (tests/documented.py) joining the session's Ray, its counts 1, 2 and 8: 8 x 0.5
    CPUs cannot be placed on 2 CPUs, so the table says so, the others still run, and the command exits 1. (A CLI
    that joins a cluster waits cluster.placement_timeout_s for a count it cannot place, an autoscaler may add nodes:
    10 s here, not the default minute.)"""
    proc = subprocess.run(documented.argv(
        "python -m raytf.launch conf/local.yaml --scaling 1,2,4 cluster.worker.cpus=0.5", "--scaling", "1,2,8",
        "--quiet", "run.name=scale", *_quick(tmp_path, FAST, ["checkpoint.every_epochs=0",
                                                             "train.params.validation_steps=0",
                                                             "cluster.placement_timeout_s=10"]),
        f"--address={state_address()}"), cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-3000:]
    run = tmp_path / "runs" / "scale"
    table = pd.read_csv(run / "scaling.csv")
    assert list(table["workers"]) == [1, 2, 8]
    assert list(table["status"]) == ["succeeded", "succeeded", "infeasible"]
    assert list(table["replicas"][:2]) == [1, 2] and list(table["global_batch"][:2]) == [16, 32]
    assert (table["examples_per_s"][:2] > 0).all() and table["speedup"][0] == 1.0
    assert (run / "scaling.png").stat().st_size > 1000 and f"raytf: scaling plot: {run / 'scaling.png'}" in proc.stdout
    assert "infeasible" in proc.stdout and "Traceback" not in proc.stderr


@pytest.mark.ray
@pytest.mark.timeout(120)
def test_the_api_reports_a_count_the_cluster_cannot_hold_without_training(fast_cfg, no_leaks):
    """raytf.scaling, the notebook's way to the report above: 8 x 0.5 CPUs on the session's 2 is infeasible (in a
    second: nothing trains), and the table and its files say so."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # (its figure too: no line drawn, no legend to warn about)
        table = raytf.scaling(fast_cfg("run.name=scale-api", "cluster.worker.cpus=0.5"), workers=[8], quiet=True)
    assert list(table["workers"]) == [8] and list(table["status"]) == ["infeasible"]
    assert list(pd.read_csv(table.attrs["csv"])["status"]) == ["infeasible"]


# A benchmark's smoke (`-m bench`): every code path, cold and warm (SMOKE_LEAVES_OUT's contenders aside; ~2 min alone).
@pytest.mark.bench
@pytest.mark.ray
@pytest.mark.timeout(900)
def test_benchmark_smoke_mode_runs():
    """One short trial of every code path (benchmarks/run.py's SMOKE_LEAVES_OUT: contenders whose code another
    one runs), so the benchmark cannot rot (its numbers are not checked here)."""
    out = benchmark_smoke("benchmarks.run", timeout_s=880)
    for name in ("hand-launched TF", "raytf CLI, embedded Ray (cold)", "raytf CLI, train.script, embedded Ray (cold)",
                 "raytf MWMS, train.script", "raytf MWMS, function", "Ray Train TensorflowTrainer |", "raytf PS"):
        assert f"| {name}" in out.stdout
    for left_out in ("Ray Train TensorflowTrainer (cold)", "raytf MWMS, function, cluster.standby=0",
                     "raytf MWMS, function + ckpt/metrics, metrics.breakdown=false"):
        assert f"| {left_out}" not in out.stdout
    assert "warm round 1/1 hand-launched TF" not in out.stdout  # the hand launch ran once, cold
    assert "wall ÷ hand" in out.stdout and "raytf wall time ÷ Ray Train, Ray already running" in out.stdout
    # The cold-launch timeline (raytf issue 38): each cold contender's phases, raytf's from its result.json.
    assert "| cold-launch timeline: boundary passed" in out.stdout
    assert "| Ray started | — |" in out.stdout and "| process exited (Ray stopped, interpreter exit) |" in out.stdout
