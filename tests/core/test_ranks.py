"""Why a run is slow, per rank: the breakdown's medians, the slowest rank, step time per rank over time, runs made
before the breakdown, and learning curves that leave raytf's timing out (pure pandas and matplotlib)."""

import math

import pandas as pd
import pyarrow as pa
import pytest

from raytf._core.metrics import rows_to_arrow
from raytf._driver import figures, ranks

NAN = float("nan")


def _row(attempt, rank, step, time, kind="step", role="worker", **values):
    return dict(run="r", attempt=attempt, rank=rank, role=role, kind=kind, epoch=1, step=step, time=time, fit=1,
                num_workers=2, **{k: v for k, v in values.items() if v is not None})


def _parts(step, inp, coll, save, comp, **more):
    return dict(step_time_s=step, input_wait_s=inp, collective_s=coll, save_s=save, compute_s=comp, **more)


def _table():
    """Attempt 1 (slow everywhere, superseded), attempt 2: rank 0 measured in full on 2 GPUs, rank 1 without its
    collective (not measurable there); attempt 3 failed before its first step (only the evaluator spoke)."""
    rows = [_row(1, r, s, 100.0 + s, **_parts(9.0, 1.0, 1.0, 0.0, 7.0)) for r in (0, 1) for s in (1, 10)]
    for i, (s, st, inp, coll, save, comp, u0, u1) in enumerate([
            (11, 1.00, 0.50, 0.10, None, 0.40, 10.0, 30.0),  # the first row: start-up
            (20, 0.10, 0.01, 0.02, None, 0.07, 50.0, 70.0),
            (30, 0.12, 0.03, 0.02, 0.06, 0.01, 55.0, 75.0)]):
        rows.append(_row(2, 0, s, 200.0 + i, **_parts(st, inp, coll, save, comp, gpu0_util=u0, gpu1_util=u1,
                                                       gpu0_mem_gib=3.0)))
    for i, (s, st, inp) in enumerate([(11, 2.0, 1.5), (20, 0.2, 0.15), (30, 0.25, 0.1)]):
        rows.append(_row(2, 1, s, 200.5 + i, **_parts(st, inp, None, None, st - inp)))
    rows.append(_row(2, 0, 30, 203.0, kind="epoch", loss=0.5, accuracy=0.9))
    rows.append(_row(3, 5, 30, 300.0, kind="eval", role="evaluator", loss=0.6))
    return rows_to_arrow(rows)


def test_breakdown_takes_medians_of_the_latest_attempt_with_step_rows():
    table = ranks.rank_breakdown(_table())
    assert list(table[["role", "rank"]].itertuples(index=False, name=None)) == [("worker", 0), ("worker", 1)]
    assert (table["attempt"] == 2).all() and table["rows"].tolist() == [3, 3] and table["steps"].tolist() == [20, 20]
    w0, w1 = table.iloc[0], table.iloc[1]
    assert w0["step_time_s"] == pytest.approx(0.12) and w1["step_time_s"] == pytest.approx(0.25)
    assert w0["input_wait_s"] == pytest.approx(0.03) and w1["input_wait_s"] == pytest.approx(0.15)
    assert w0["save_s"] == pytest.approx(0.06)  # the one row that saved; the others have no value
    assert math.isnan(w1["collective_s"]) and math.isnan(w1["save_s"])  # never measured: NaN, not 0
    assert w0["input_share"] == pytest.approx(0.25) and w1["input_share"] == pytest.approx(0.6)
    assert w0[ranks.GPU_UTIL] == pytest.approx(60.0) and math.isnan(w1[ranks.GPU_UTIL])  # gpu*_mem_gib not counted
    assert table["host"].isna().all()
    first = ranks.rank_breakdown(_table(), attempt=1)
    assert first["step_time_s"].tolist() == [9.0, 9.0] and first["steps"].tolist() == [10, 10]


def test_hosts_come_from_result_json_only_when_its_tasks_are_that_attempts():
    tasks = [{"role": "worker", "rank": 0, "host": "10.0.0.1"}, {"role": "worker", "rank": 1,
                                                                  "address": "10.0.0.2:2222"}]  # an older summary
    current = {"attempts": [{"attempt": 1}, {"attempt": 2}], "tasks": tasks}
    assert ranks.rank_breakdown(_table(), summary=current)["host"].tolist() == ["10.0.0.1", "10.0.0.2"]
    later = {"attempts": [{"attempt": 2}, {"attempt": 3}], "tasks": tasks}  # attempt 3 was placed elsewhere
    assert ranks.rank_breakdown(_table(), summary=later)["host"].isna().all()


def _breakdown(*step_times, roles=None):
    return pd.DataFrame({"role": roles or ["worker"] * len(step_times), "rank": range(len(step_times)),
                         "step_time_s": step_times})


def test_the_slowest_rank_has_the_highest_median_step_time():
    assert ranks.slowest_rank(ranks.rank_breakdown(_table()))["rank"] == 1
    assert ranks.slowest_rank(_breakdown(0.1, 0.3, NAN, 0.3))["rank"] == 1  # a tie: the lowest rank; NaN skipped
    assert ranks.slowest_rank(_breakdown(0.2, 0.2)) is None  # no rank slower than the others
    assert ranks.slowest_rank(_breakdown(0.2))["rank"] == 0
    assert ranks.slowest_rank(_breakdown(NAN, NAN)) is None
    assert ranks.slowest_rank(ranks.rank_breakdown(pa.table({}))) is None


def test_the_slowest_rank_is_the_one_the_others_wait_for():
    """Synchronous steps take as long on every rank; the fast ones wait in the all-reduce: the slowest rank is the
    one with the most time of its own."""
    table = pd.DataFrame({"role": ["worker"] * 3, "rank": [0, 1, 2], "step_time_s": [0.2, 0.2, 0.2],
                          "collective_s": [0.12, 0.01, 0.11]})
    assert ranks.slowest_rank(table)["rank"] == 1
    assert ranks.own_time(table).round(3).tolist() == [0.08, 0.19, 0.09]


def test_a_run_made_before_the_breakdown_has_none():
    old = rows_to_arrow([_row(1, r, s, float(s), loss=1.0, steps_per_s=5.0) for r in (0, 1) for s in (1, 10)])
    assert ranks.no_breakdown(old) == ranks.OLDER_RAYTF and "older raytf" in ranks.OLDER_RAYTF
    empty = ranks.rank_breakdown(old)
    assert empty.empty and list(empty.columns) == list(ranks.COLUMNS)
    assert ranks.rank_step_times(old).empty
    epochs_only = rows_to_arrow([_row(1, 0, 10, 1.0, kind="epoch", loss=1.0)])
    assert ranks.no_breakdown(epochs_only) == ranks.NO_STEP_ROWS == ranks.no_breakdown(pa.table({}))
    assert ranks.no_breakdown(_table()) is None


def test_step_times_per_rank_run_from_the_runs_first_row():
    times = ranks.rank_step_times(_table())
    assert len(times) == 10  # every attempt's step rows, no epoch or eval row
    assert times["t"].iloc[0] == 0.0 and times["t"].is_monotonic_increasing
    w1 = times[(times["rank"] == 1) & (times["attempt"] == 2)]
    assert w1["t"].tolist() == [99.5, 100.5, 101.5] and w1["step_time_s"].tolist() == [2.0, 0.2, 0.25]


def test_the_ranks_figure_has_a_line_per_rank_broken_between_attempts():
    fig = figures.ranks_figure(ranks.rank_step_times(_table()), title="r")
    try:
        ax, below = fig.axes
        lines = {line.get_label(): line for line in ax.lines if not line.get_label().startswith("_")}
        assert set(lines) == {"worker 0", "worker 1"}
        # Below: each rank's own time a step (less its all-reduce wait) and its input wait.
        own = {line.get_label(): line for line in below.lines if not line.get_label().startswith("_")}
        assert {"worker 0: own time", "worker 1: own time", "worker 0: input wait"} <= set(own)
        times = ranks.rank_step_times(_table())
        w0 = times[times["rank"] == 0].dropna(subset=["own_s"])
        assert (w0["own_s"] <= w0["step_time_s"]).all()
        ys = lines["worker 1"].get_ydata()
        assert len(ys) == 6 and math.isnan(ys[2])  # attempt 1's two rows, a break, attempt 2's three
        assert ys[3] == pytest.approx(2000.0)  # milliseconds
        assert [t.get_text().strip() for t in ax.texts] == ["attempt 2"]
        assert [line.get_xdata()[0] for line in ax.lines if line.get_linestyle() == ":"] == [pytest.approx(99.0)]
    finally:
        import matplotlib.pyplot as plt

        plt.close("all")
    assert figures.fig_png(figures.ranks_figure(ranks.rank_step_times(_table()))).startswith(b"\x89PNG\r\n\x1a\n")


def test_many_ranks_are_drawn_as_their_spread_and_the_slowest_ones():
    """20 ranks in step (synchronous: the same step time), two attempts of 3 steps; rank 13 spends no time waiting
    in the all-reduce (the others wait 50 ms for it), rank 7 waits less than the rest; rank 4 reports one step more."""
    wait = {13: 0.0, 7: 0.02}
    rows = [_row(a, r, s, 100.0 * a + s + r / 100, **_parts(0.1 * a, 0.01, wait.get(r, 0.05), None, None))
            for a in (1, 2) for s in (1, 2, 3) for r in range(20)]
    rows += [_row(2, 4, 4, 206.0, **_parts(0.5, 0.3, 0.45, None, None))]  # one more step: rank 4's alone
    fig = figures.ranks_figure(ranks.rank_step_times(rows_to_arrow(rows)))
    try:
        top, below = fig.axes
        labels = [[line.get_label() for line in ax.lines if not line.get_label().startswith("_")]
                  for ax in (top, below)]
        # The spread, then the 3 ranks with the most time of their own a step (of the ties, the first): not 20 lines.
        assert labels[0] == ["step time: median of 20 ranks"]  # (the same for every rank under synchronous training)
        assert labels[1] == ["own time: median of 20 ranks", "input wait: median of 20 ranks", "worker 13: own time",
                             "worker 7: own time", "worker 0: own time"]
        median = top.lines[0].get_ydata()
        assert len(median) == 3 + 1 + 4 and math.isnan(median[3])  # attempt 1's steps, a break, attempt 2's
        assert median[:3] == pytest.approx([100.0] * 3) and median[4:7] == pytest.approx([200.0] * 3)
        assert median[7] == pytest.approx(500.0)  # a step one rank reported: its own value
        own = below.lines[0].get_ydata()
        assert own[0] == pytest.approx(50.0) and own[4] == pytest.approx(150.0)  # the ranks' median own time
        # The range behind each median: from 50 ms (waiting) to 200 ms (rank 13 in attempt 2, not waiting).
        bands = [c for c in below.collections if c.get_label() == "own time: range of 20 ranks"]
        assert len(bands) == 1
        ys = [y for path in bands[0].get_paths() for _, y in path.vertices]
        assert min(ys) == pytest.approx(50.0) and max(ys) == pytest.approx(200.0)
        assert [t.get_text().strip() for t in top.texts] == ["attempt 2"]
    finally:
        import matplotlib.pyplot as plt

        plt.close("all")


def test_learning_curves_leave_raytfs_timing_out():
    table = _table().to_pandas()
    # A program that put raytf's names in its epoch logs, and an evaluator that did: still no learning curves.
    table.loc[table["kind"] == "epoch", ["steps_per_s", "step_time_s", "gpu0_util"]] = [5.0, 0.2, 60.0]
    table.loc[table["kind"] == "eval", "steps_per_s"] = 3.0
    curves = figures.learning_curves(table)
    assert sorted(curves.columns) == ["accuracy", "eval_loss", "loss"]
    by_hand = curves.assign(val_step_time_s=0.1, steps_per_s=5.0)
    fig = figures.figure(by_hand)
    try:
        assert sorted(ax.get_title() for ax in fig.axes) == ["accuracy", "loss"]
    finally:
        import matplotlib.pyplot as plt

        plt.close("all")
