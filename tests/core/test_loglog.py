"""benchmarks/loglog.py: the growth exponent of a cost in N, and which parts the scale report names as growing
faster than linearly (issue 38). Pure: no Ray."""

import pytest

from benchmarks import loglog


def test_exponent_of_linear_quadratic_and_flat_series():
    ns = [8, 32, 128, 512]
    assert loglog.exponent(ns, [0.5 * n for n in ns]) == pytest.approx(1.0)
    assert loglog.exponent(ns, [3e-4 * n * n for n in ns]) == pytest.approx(2.0)
    assert loglog.exponent(ns, [0.2, 0.2, 0.2, 0.2]) == pytest.approx(0.0)


def test_exponent_needs_two_usable_sizes():
    assert loglog.exponent([8], [1.0]) is None
    assert loglog.exponent([8, 32], [1.0, 0.0]) is None  # a zero cost has no logarithm: not a point
    assert loglog.exponent([8, 8], [1.0, 2.0]) is None


def _orch(n: int, addressed: float) -> dict:
    return {"tasks": n, "bare_up": 0.57 * n, "addressed": addressed, "down": 0.05 * n, "driver_cpu_s": 0.01 * n}


def _intake(n: int) -> dict:
    return {"ranks": n, "driver_cpu": 1e-4 * n, "bus_cpu": 2e-3 * n, "intake_p99": 0.05, "end_s": 1e-3 * n,
            "show_s": 1.0 + 1e-3 * n}


def test_report_names_the_part_that_grows_faster_than_linearly():
    linear = [_orch(n, 1.05 * n) for n in (8, 32, 128)]
    lines = loglog.report(linear, [_intake(n) for n in (8, 32, 128, 512)])
    assert lines[-1].endswith("none")
    assert "| raytf: all addressed (s) | tasks | 1.00 |" in lines
    quadratic = [_orch(n, 0.01 * n * n) for n in (8, 32, 128)]
    assert loglog.report(quadratic, [])[-1] == "faster than linear (exponent > 1.25): raytf: all addressed (s) (2.00)"


def test_figure_has_both_panels_on_log_axes():
    fig = loglog.figure([_orch(n, 1.05 * n) for n in (8, 32, 128)], [_intake(n) for n in (8, 32, 128, 512)])
    assert [ax.get_xscale() for ax in fig.axes] == ["log", "log"]
    assert [ax.get_yscale() for ax in fig.axes] == ["log", "log"]
    assert len(fig.axes[1].get_lines()) == len(loglog.INTAKE) + 1  # every series, and the linear guide


def test_report_of_one_size_says_there_is_nothing_to_fit():
    assert loglog.report([_orch(8, 8.0)], [_intake(8)]) == ["(one size of each part: no growth to fit)"]


def test_training_part_fits_the_sizes_each_series_has_and_gets_a_panel():
    # Hand-launched training ran up to 8 workers, raytf to 16: each series is fitted on its own sizes.
    rows = [{"workers": n, "hand_first_step_s": 2.0 * n if n <= 8 else None, "raytf_first_step_s": 0.5 * n * n,
             "hand_step_ms": 9.0 * n if n <= 8 else None, "raytf_step_ms": 10.0 * n} for n in (2, 4, 8, 16)]
    lines = loglog.report([], [], rows)
    assert "| hand-launched: launch to first step (s) | workers | 1.00 |" in lines
    assert "| raytf: step (ms) | workers | 1.00 |" in lines
    assert lines[-1] == "faster than linear (exponent > 1.25): raytf: launch to first step (s) (2.00)"
    fig = loglog.figure([_orch(n, 1.05 * n) for n in (8, 32)], [_intake(n) for n in (8, 32)], rows)
    assert len(fig.axes) == 3 and fig.axes[2].get_xlabel() == "workers"
    assert len(fig.axes[2].get_lines()) == len(loglog.TRAINING) + 1
