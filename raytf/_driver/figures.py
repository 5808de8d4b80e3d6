"""Figures of a run, pure (no I/O): learning curves from a metrics table (the data, pandas) and as a matplotlib
figure with the group's size changes marked, step time per rank (`_driver.ranks`' data), the scaling report's
figure, and any of them as PNG bytes."""

from __future__ import annotations

import sys
import threading

import pandas as pd
import pyarrow as pa

from raytf._core.breakdown import INPUT_WAIT, STEP_TIME, is_timing
from raytf._core.metrics import BASE_COLUMNS

CURVES_FILE = "learning_curves.png"


def learning_curves(metrics: pa.Table | pd.DataFrame) -> pd.DataFrame:
    """One row per epoch: every epoch metric averaged over ranks, plus the evaluator's as `eval_<name>`.

    Where an epoch was trained by several attempts (a failure, a resume), or numbered again by a later Model.fit
    of the same program, the last attempt's (and in it the last fit's) rows count: they are the ones the final
    model descends from."""
    df = metrics.to_pandas() if isinstance(metrics, pa.Table) else metrics
    if df.empty or "kind" not in df:
        return pd.DataFrame()
    out = []
    for kind, prefix in (("epoch", ""), ("eval", "eval_")):
        rows = df[df["kind"] == kind]
        if rows.empty:
            continue
        rows = _latest(rows)
        # raytf's own timing (steps/s, the step-time breakdown, GPU use) is about the run, not the model: only step
        # rows carry it today, and a program's metric of the same name is left out too.
        values = [c for c in rows.columns if c not in BASE_COLUMNS and not is_timing(c) and rows[c].notna().any()]
        out.append(rows.groupby("epoch")[values].mean().add_prefix(prefix))
    return pd.concat(out, axis=1).sort_index() if out else pd.DataFrame()


def _latest(rows: pd.DataFrame) -> pd.DataFrame:
    """Of each epoch's rows, those of its last attempt (and in it its last fit)."""
    # (attempt, fit) as one orderable number; a missing fit (custom loops, older runs) is 0.
    order = rows["attempt"].astype("int64") * 1_000_000 + rows.get("fit", pd.Series(0, index=rows.index)) \
        .fillna(0).astype("int64")
    return rows[order == order.groupby(rows["epoch"]).transform("max")]


def size_changes(metrics: pa.Table | pd.DataFrame) -> list[tuple[float, int]]:
    """Where the group's size changed (elastic training), as (x in the curves' epochs, workers): the first step
    of each attempt whose `num_workers` differs from the attempt's before it that trained (attempts that trained
    nothing, the evaluator's rows and rows without a size do not count). x places that step between the epochs'
    ends (epoch 3 ended at step 30, epoch 4 at step 40: step 35 is x = 3.5); without step counts (a script that
    reports epochs only), at the end of the epoch before the attempt's first row."""
    df = metrics.to_pandas() if isinstance(metrics, pa.Table) else metrics
    if df.empty or "num_workers" not in df or "kind" not in df:
        return []
    rows = df[df["kind"].isin(("step", "epoch")) & df["num_workers"].notna()]
    if rows.empty:
        return []
    firsts = rows.sort_values(["attempt", "step", "time"]).drop_duplicates("attempt")
    ends = _latest(df[df["kind"] == "epoch"]).groupby("epoch")["step"].max().sort_index()
    ends = ends[ends > 0]
    out: list[tuple[float, int]] = []
    before = None
    for _, first in firsts.iterrows():
        workers = int(first["num_workers"])
        if before is not None and workers != before:
            out.append((_epoch_position(first, ends), workers))
        before = workers
    return out


def _epoch_position(row: pd.Series, ends: pd.Series) -> float:
    """An attempt's first row's step in epochs: interpolated between the epochs' last steps (`ends`)."""
    step = int(row["step"])
    if step <= 0 or ends.empty:
        return float(int(row["epoch"]) - 1)
    epochs, steps = [0, *ends.index.astype(int)], [0, *ends.cummax().astype(int)]
    for (e0, s0), (e1, s1) in zip(zip(epochs, steps), zip(epochs[1:], steps[1:])):
        if step <= s1 and s1 > s0:
            return e0 + (e1 - e0) * (step - s0) / (s1 - s0)
    return float(epochs[-1])  # after the last epoch's end (a run still going): at the last epoch


def _panels(curves: pd.DataFrame) -> dict[str, list[str]]:
    """Group columns by metric: loss with val_loss and eval_loss, accuracy with val_accuracy, ...; raytf's timing
    columns are no learning curve (curves made by hand may hold them)."""
    panels: dict[str, list[str]] = {}
    for col in curves.columns:
        base = col.removeprefix("eval_").removeprefix("val_")
        if not is_timing(base):
            panels.setdefault(base, []).append(col)
    return panels


_prefetch: threading.Thread | None = None


def prefetch() -> None:
    """matplotlib.pyplot imported in a background thread, from now: for a run's learning curves, drawn at its end,
    whose 0.3 s of pyplot's import (of 0.5 s, the whole drawing) then runs while the attempt's teardown waits on Ray
    (raytf issue 53: the cold CLI's own share). Once; not in a notebook, whose kernel sets its backend up itself."""
    global _prefetch
    if _prefetch is not None or "ipykernel" in sys.modules or "matplotlib.pyplot" in sys.modules:
        return
    _prefetch = threading.Thread(target=_quiet_pyplot, name="raytf-pyplot-import", daemon=True)
    _prefetch.start()


def prefetched() -> None:
    """Until `prefetch`'s import is done, if one runs: before any other thread imports matplotlib. Its modules import
    each other, and two threads importing them at once can meet one half-initialised: "cannot import name
    'NullFormatter' from partially initialized module 'matplotlib.ticker'" failed a CLI run at its end in a rehearsal
    (the main thread drawing the curves, `figure`'s first import, while the prefetch still ran)."""
    t = _prefetch
    if t is not None and t is not threading.current_thread():
        t.join()


def _quiet_pyplot() -> None:
    try:
        _pyplot()
    except ImportError:  # (the drawing itself meets it again, and says so)
        pass


def _pyplot():
    """matplotlib.pyplot, imported on first use (it is slow to import)."""
    prefetched()
    import matplotlib

    if "ipykernel" not in sys.modules:  # a notebook keeps its inline backend; elsewhere no display is needed
        matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def figure(curves: pd.DataFrame, title: str = "", resizes: list[tuple[float, int]] = ()):
    """A matplotlib Figure with one panel per metric (train, validation and evaluator curves); each of
    `resizes` (`size_changes`) a dotted vertical line labelled with the workers trained from there."""
    plt = _pyplot()  # (first: it waits for the prefetch's import)
    from matplotlib.ticker import MaxNLocator

    panels = _panels(curves)
    n = max(1, len(panels))
    fig, axes = plt.subplots(1, n, figsize=(4.5 * n, 3.6), squeeze=False)
    for ax, (base, cols) in zip(axes[0], panels.items()):
        for col in cols:
            series = curves[col].dropna()
            label = "validation" if col.startswith("val_") else "evaluator" if col.startswith("eval_") else "train"
            ax.plot(series.index, series.values, marker="o", label=label)
        for x, workers in resizes:
            ax.axvline(x, color="gray", linestyle=":", linewidth=1)
            ax.text(x, 0.98, f" {workers} workers", transform=ax.get_xaxis_transform(), rotation=90,
                    va="top", ha="left", fontsize=8, color="gray")
        ax.set_title(base)
        ax.set_xlabel("epoch")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(alpha=0.3)
        ax.legend()
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return fig


def png_bytes(curves: pd.DataFrame, title: str = "", resizes: list[tuple[float, int]] = ()) -> bytes:
    return fig_png(figure(curves, title, resizes))


def fig_png(fig) -> bytes:
    """A figure as PNG bytes (then closed)."""
    import io

    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    plt.close(fig)
    return buf.getvalue()


# More ranks than this, and the ranks figure draws their spread (the median and the range over the ranks, step by
# step) and the slowest ones, not a line each: 10 colours tell 8 lines apart, 512 ranks' 1,536 lines and their legend
# took 22 s to draw and said nothing (`python -m benchmarks.scale`, raytf issue 38).
LINES_PER_RANK_UP_TO = 8
SLOWEST_SHOWN = 3  # of many ranks, the ones with the most time of their own a step, a line each
# (axis, column, line style, a rank's label after its name, the spread's label)
_PANELS = ((0, STEP_TIME, "-", "", "step time"), (1, "own_s", "-", ": own time", "own time"),
           (1, INPUT_WAIT, "--", ": input wait", "input wait"))


def ranks_figure(times: pd.DataFrame, title: str = ""):
    """Per rank over time (`ranks.rank_step_times`): the step time (top) and, below, each rank's own time a step
    (its all-reduce wait left out: under synchronous training every rank's step is as long as the slowest's, so
    this is where a slow rank shows) with its input wait dashed. Up to `LINES_PER_RANK_UP_TO` ranks, a line each;
    more, the median over the ranks and their range (min to max) step by step, and below, the `SLOWEST_SHOWN`
    ranks with the most time of their own a step (over the run), a line each. Lines break between attempts (a
    restart's gap is no step time); each attempt after the first a dotted vertical line where it starts."""
    plt = _pyplot()
    fig, axes = plt.subplots(2, 1, figsize=(9, 6), sharex=True)
    series = times.groupby(["role", "rank"])
    if series.ngroups <= LINES_PER_RANK_UP_TO:
        for i, ((role, rank), rows) in enumerate(series):
            _rank_lines(axes, rows, f"C{i % 10}", f"{role} {rank}", _PANELS)
    else:
        _spread(axes, times, series.ngroups)
        own = series["own_s"].median().dropna().sort_values(ascending=False, kind="stable")
        for i, (role, rank) in enumerate(own.index[:SLOWEST_SHOWN]):
            _rank_lines(axes, series.get_group((role, rank)), f"C{i + 1}", f"{role} {rank}", _PANELS[1:2])
    top, bottom = axes
    starts = times.groupby("attempt")["t"].min().sort_index()
    for ax in axes:
        for attempt, t in starts.iloc[1:].items():
            ax.axvline(t, color="gray", linestyle=":", linewidth=1)
            ax.text(t, 0.98, f" attempt {attempt}", transform=ax.get_xaxis_transform(), rotation=90, va="top",
                    ha="left", fontsize=8, color="gray")
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        if ax.get_lines():
            ax.legend(fontsize=8)
    top.set_ylabel("step time (ms)")
    bottom.set_ylabel("ms per step")
    bottom.set_title("each rank's own time (step less its all-reduce wait) and input wait", fontsize=9)
    bottom.set_xlabel("seconds since the run's first row")
    if title:
        top.set_title(title)
    fig.tight_layout()
    return fig


def _broken(rows: pd.DataFrame, columns: list[str]) -> list[list[float]]:
    """`columns` of `rows` as lists, attempt after attempt with a NaN between (a line breaks there)."""
    out: list[list[float]] = [[] for _ in columns]
    for _, part in rows.groupby("attempt"):
        for values, column in zip(out, columns):
            if values:
                values.append(float("nan"))
            values += part[column].astype(float).tolist()
    return out


def _rank_lines(axes, rows: pd.DataFrame, color: str, name: str, panels) -> None:
    """One rank's lines, in milliseconds."""
    for panel, column, style, what, _ in panels:
        if column not in rows or rows[column].isna().all():
            continue
        xs, ys = _broken(rows, ["t", column])
        axes[panel].plot(xs, [1000 * y for y in ys], marker="." if style == "-" else None, linestyle=style,
                         color=color, label=name + what)


def _spread(axes, times: pd.DataFrame, n: int) -> None:
    """Step by step (each attempt's), the median over the ranks and their range, in milliseconds; at the median
    time the ranks reported that step."""
    for panel, column, style, _, label in _PANELS:
        if column not in times or times[column].isna().all():
            continue
        by_step = times.dropna(subset=[column]).groupby(["attempt", "step"])
        agg = by_step.agg(t=("t", "median"), lo=(column, "min"), mid=(column, "median"), hi=(column, "max"))
        # (In time order: a later Model.fit of the same attempt may number its steps again.)
        xs, lo, mid, hi = _broken(agg.reset_index().sort_values(["attempt", "t"], kind="stable"),
                                  ["t", "lo", "mid", "hi"])
        axes[panel].fill_between(xs, [1000 * y for y in lo], [1000 * y for y in hi], color="C0",
                                 alpha=0.15 if style == "-" else 0.08, linewidth=0,
                                 label=f"{label}: range of {n} ranks")
        axes[panel].plot(xs, [1000 * y for y in mid], linestyle=style, color="C0",
                         label=f"{label}: median of {n} ranks")


def scaling_figure(table: pd.DataFrame, title: str = ""):
    """Throughput against workers (with the ideal line from the smallest count) and scaling efficiency."""
    plt = _pyplot()
    ok = table.dropna(subset=["examples_per_s"])
    fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.6))
    if not ok.empty:
        w0, e0 = ok["workers"].iloc[0], ok["examples_per_s"].iloc[0]
        left.plot(ok["workers"], ok["examples_per_s"], marker="o", label="measured")
        left.plot(ok["workers"], e0 * ok["workers"] / w0, linestyle="--", color="gray", label="linear")
        # Evenly spaced bars labelled by count (string x values make matplotlib log a "categorical" notice).
        positions = list(range(len(ok)))
        right.bar(positions, 100 * ok["efficiency"])
        right.set_xticks(positions, [str(w) for w in ok["workers"]])
    left.set_xlabel("workers")
    left.set_ylabel("examples/s")
    left.set_xticks(list(table["workers"]))
    left.grid(alpha=0.3)
    if not ok.empty:  # (no count measured, nothing to name: matplotlib warns of a legend without lines)
        left.legend()
    right.set_xlabel("workers")
    right.set_ylabel("scaling efficiency %")
    right.axhline(100, linestyle="--", color="gray")
    right.grid(alpha=0.3, axis="y")
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return fig
