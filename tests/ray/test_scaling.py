"""The scaling report (raytf.scaling / --scaling) and the benchmark's smoke mode."""

from pathlib import Path

import pandas as pd
import pytest

import raytf
from tests.conftest import benchmark_smoke


@pytest.mark.slow  # step 2: three runs (~35 s)
@pytest.mark.ray
@pytest.mark.timeout(400)
def test_scaling_report_runs_each_count(fast_cfg, no_leaks):
    cfg = fast_cfg("run.name=scale", "cluster.worker.cpus=0.5", "checkpoint.every_epochs=0",
                   "checkpoint.export_model=false")
    table = raytf.scaling(cfg, workers=[1, 2, 8], quiet=True)  # 8 x 0.5 CPUs cannot be placed on 2 CPUs
    assert list(table["workers"]) == [1, 2, 8]
    assert list(table["status"]) == ["succeeded", "succeeded", "infeasible"]
    assert list(table["replicas"][:2]) == [1, 2] and list(table["global_batch"][:2]) == [16, 32]
    assert (table["examples_per_s"][:2] > 0).all() and table["speedup"][0] == 1.0
    assert Path(table.attrs["plot"]).stat().st_size > 1000
    assert list(pd.read_csv(table.attrs["csv"])["workers"]) == [1, 2, 8]


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
