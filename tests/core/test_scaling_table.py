"""The scaling report's pure parts: parsing --scaling, the table's speedup and efficiency, the steady rate,
and what it refuses before running anything."""


import pandas as pd
import pytest

import raytf
from raytf.api.scaling import parse_workers, steady_steps_per_s, with_speedup
from raytf.errors import ConfigError
from tests.conftest import ROOT


def test_parse_workers():
    assert parse_workers("4,1,2,2") == [1, 2, 4]
    for bad in ("", "1,x", "0,2", "-1"):
        with pytest.raises(ConfigError, match="--scaling"):
            parse_workers(bad)


def test_speedup_and_efficiency_from_the_smallest_count_that_ran():
    rows = [{"workers": 1, "status": "infeasible", "run": "a"},
            {"workers": 2, "examples_per_s": 1000.0, "status": "succeeded", "run": "b"},
            {"workers": 4, "examples_per_s": 1500.0, "status": "succeeded", "run": "c"}]
    t = with_speedup(rows)
    assert list(t["speedup"].round(3)[1:]) == [1.0, 1.5]
    assert list(t["efficiency"].round(3)[1:]) == [1.0, 0.75]
    assert pd.isna(t["speedup"][0])
    # A run that failed part-way is not the baseline, even with a rate from its first steps.
    failed_first = [{**rows[1], "workers": 1, "status": "failed", "examples_per_s": 10.0}, *rows[1:]]
    assert list(with_speedup(failed_first)["speedup"].round(3)) == [0.01, 1.0, 1.5]


def test_steady_rate_skips_the_first_report_and_epoch():
    df = pd.DataFrame({"kind": ["step", "step", "step", "step", "epoch"], "rank": [0, 0, 0, 1, 0],
                       "epoch": [1, 1, 2, 2, 1], "step": [1, 5, 10, 10, 5],
                       "steps_per_s": [1.0, 5.0, 9.0, 100.0, None]})
    assert steady_steps_per_s(df) == 9.0
    assert steady_steps_per_s(df[df["epoch"] == 1]) == 5.0


def test_scaling_refuses_scripts_and_single_task_strategies():
    with pytest.raises(ConfigError, match="training function"):
        raytf.scaling(ROOT / "conf/script.yaml", workers=[1, 2])
    with pytest.raises(ConfigError, match="one task"):
        raytf.scaling(ROOT / "conf/local.yaml", ["cluster.strategy=mirrored", "cluster.num_workers=1"], workers=[1])
    # The worker counts are a keyword argument, as fit's first arguments are every API function's.
    with pytest.raises(TypeError, match=r"raytf.scaling\(config, workers=\[1, 2\]\)"):
        raytf.scaling(ROOT / "conf/local.yaml", [1, 2])
    with pytest.raises(ConfigError, match=r"metrics.every_steps \(0\) must be at least 1"):
        raytf.scaling(ROOT / "conf/local.yaml", ["metrics.every_steps=0"], workers=[1, 2])
