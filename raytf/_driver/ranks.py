"""Why a run is slow, per rank, pure (pandas): each rank's step-time breakdown (`_core.breakdown`'s columns of
the step rows) summarised by medians, the slowest rank, and step time per rank over time for a figure."""

from __future__ import annotations

import math

import pandas as pd
import pyarrow as pa

from raytf._core import breakdown as bd

# rank_breakdown's columns, in the order `python -m raytf.runs show` prints them; gpu_util follows when the run
# sampled GPUs.
COLUMNS = ("role", "rank", "host", "attempt", "rows", "steps", *bd.BREAKDOWN, "input_share")
GPU_UTIL = "gpu_util"
OLDER_RAYTF = "its step rows have no step-time breakdown (made by an older raytf)"
NO_STEP_ROWS = "no step rows (metrics.every_steps is 0, or none reported yet)"


def _frame(metrics: pa.Table | pd.DataFrame) -> pd.DataFrame:
    return metrics.to_pandas() if isinstance(metrics, pa.Table) else metrics


def _step_rows(df: pd.DataFrame) -> pd.DataFrame:
    return df[df["kind"] == "step"] if not df.empty and "kind" in df else df.iloc[0:0]


def no_breakdown(metrics: pa.Table | pd.DataFrame) -> str | None:
    """Why the run has no breakdown to show (a phrase), or None when its step rows carry one."""
    steps = _step_rows(_frame(metrics))
    if steps.empty:
        return NO_STEP_ROWS
    # A column exists once any row had the value: a run whose step rows never did is one from before the breakdown.
    return None if bd.STEP_TIME in steps else OLDER_RAYTF


def rank_breakdown(metrics: pa.Table | pd.DataFrame, attempt: int | None = None,
                   summary: dict | None = None) -> pd.DataFrame:
    """One row per (role, rank) of one attempt's step rows (`attempt`; None: the latest attempt that has step
    rows, since one that failed before its first step has nothing to say), ordered by rank.

    Columns: role, rank, host (from `summary`, the run's result.json, when its tasks are that attempt's; else
    None), attempt, rows (step rows),
    steps (the span they cover: last step - first step + 1, a task reporting its first step), the medians over the
    rows of step_time_s, input_wait_s, collective_s, save_s and compute_s (seconds per step; NaN for a part never
    measured on that rank), input_share (median input wait / median step time), and gpu_util (the median over
    rows of the task's GPUs' mean utilisation, percent) when the run sampled GPUs.
    Medians, not means: a rank's first row includes the start-up (tracing, the first batch), and a checkpoint's
    save lands on one row in many. Empty (with these columns) when there is no breakdown (`no_breakdown`)."""
    df = _frame(metrics)
    gpus = [c for c in df.columns if bd.is_gpu_column(c) and c.endswith("_util")]
    columns = [*COLUMNS, *([GPU_UTIL] if gpus else [])]
    if no_breakdown(df):
        return pd.DataFrame(columns=columns)
    steps = _step_rows(df)
    attempt = int(steps["attempt"].max()) if attempt is None else attempt
    steps = steps[steps["attempt"] == attempt]
    hosts = _hosts(summary or {}, attempt)
    out = []
    for (role, rank), rows in steps.groupby(["role", "rank"], sort=False):
        row = {"role": role, "rank": int(rank), "host": hosts.get((role, int(rank))), "attempt": attempt,
               "rows": len(rows), "steps": int(rows["step"].max() - rows["step"].min() + 1)}
        for part in bd.BREAKDOWN:
            row[part] = rows[part].median() if part in rows else math.nan
        row["input_share"] = (row[bd.INPUT_WAIT] / row[bd.STEP_TIME] if row[bd.STEP_TIME] > 0 else math.nan)
        if gpus:
            row[GPU_UTIL] = rows[gpus].mean(axis=1).median()  # a row without samples is NaN: skipped
        out.append(row)
    table = pd.DataFrame(out, columns=columns)
    return table.sort_values(["rank", "role"], ignore_index=True)


def own_time(breakdown: pd.DataFrame) -> pd.Series:
    """Each rank's median step time less its wait in the all-reduce (where timed): under synchronous training every
    rank's step lasts as long as the slowest's, the others spending the difference waiting for it there, so this
    is what tells the ranks apart."""
    step = breakdown[bd.STEP_TIME].astype(float)
    if bd.COLLECTIVE in breakdown:
        step = step - breakdown[bd.COLLECTIVE].astype(float).fillna(0.0)
    return step


def slowest_rank(breakdown: pd.DataFrame) -> pd.Series | None:
    """The row of `rank_breakdown` with the most time of its own a step (`own_time`; of ties, the lowest rank): the
    rank the others wait for. None when no rank has a step time, or when there are several and all are equal
    (no rank is slower than the others)."""
    timed = breakdown.dropna(subset=[bd.STEP_TIME]) if bd.STEP_TIME in breakdown else breakdown.iloc[0:0]
    if timed.empty:
        return None
    own = own_time(timed)
    if len(timed) > 1 and own.round(9).nunique() == 1:
        return None
    # idxmax gives the first of equal maxima; the table is ordered by rank.
    return timed.loc[own.idxmax()]


def rank_step_times(metrics: pa.Table | pd.DataFrame) -> pd.DataFrame:
    """Step time per rank over time, every attempt: columns attempt, role, rank, step, t (seconds since the run's
    first row, any kind), step_time_s, own_s (`own_time`: the step less its all-reduce wait, which tells the ranks
    apart under synchronous training) and input_wait_s (NaN where not measured); rows with a step time, in time
    order. Empty (with these columns) when there is no breakdown."""
    columns = ["attempt", "role", "rank", "step", "t", bd.STEP_TIME, "own_s", bd.INPUT_WAIT]
    df = _frame(metrics)
    if no_breakdown(df):
        return pd.DataFrame(columns=columns)
    steps = _step_rows(df).dropna(subset=[bd.STEP_TIME])
    if bd.INPUT_WAIT not in steps:
        steps = steps.assign(**{bd.INPUT_WAIT: float("nan")})
    out = steps.assign(t=steps["time"] - df["time"].min(), own_s=own_time(steps))[columns]
    return out.sort_values("t", kind="stable", ignore_index=True)


def _hosts(summary: dict, attempt: int) -> dict[tuple[str, int], str]:
    """{(role, rank): host} from result.json's tasks, when they are `attempt`'s: the summary lists the tasks of
    its latest placed attempt only, and a retry may put a rank on another host. An older summary's task without
    `host` gives its address' host."""
    numbers = [a.get("attempt") for a in summary.get("attempts") or [] if isinstance(a, dict)]
    numbers = [n for n in numbers if isinstance(n, int)]
    if numbers and max(numbers) != attempt:
        return {}
    out = {}
    for t in summary.get("tasks") or []:
        host = t.get("host") or str(t.get("address") or "").rpartition(":")[0]
        if host and "role" in t and "rank" in t:
            out[(t["role"], int(t["rank"]))] = host
    return out
