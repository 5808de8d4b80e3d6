"""Figures of a run, pure (no I/O): learning curves from a metrics table (the data, pandas) and as a matplotlib
figure, the scaling report's figure, and either as PNG bytes."""

from __future__ import annotations

import sys

import pandas as pd
import pyarrow as pa

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
        # (attempt, fit) as one orderable number; a missing fit (custom loops, older runs) is 0.
        order = rows["attempt"].astype("int64") * 1_000_000 + rows.get("fit", pd.Series(0, index=rows.index)) \
            .fillna(0).astype("int64")
        rows = rows[order == order.groupby(rows["epoch"]).transform("max")]
        values = [c for c in rows.columns if c not in BASE_COLUMNS and rows[c].notna().any()]
        out.append(rows.groupby("epoch")[values].mean().add_prefix(prefix))
    return pd.concat(out, axis=1).sort_index() if out else pd.DataFrame()


def _panels(curves: pd.DataFrame) -> dict[str, list[str]]:
    """Group columns by metric: loss with val_loss and eval_loss, accuracy with val_accuracy, ..."""
    panels: dict[str, list[str]] = {}
    for col in curves.columns:
        base = col.removeprefix("eval_").removeprefix("val_")
        panels.setdefault(base, []).append(col)
    return panels


def _pyplot():
    """matplotlib.pyplot, imported on first use (it is slow to import)."""
    import matplotlib

    if "ipykernel" not in sys.modules:  # a notebook keeps its inline backend; elsewhere no display is needed
        matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def figure(curves: pd.DataFrame, title: str = ""):
    """A matplotlib Figure with one panel per metric (train, validation and evaluator curves)."""
    from matplotlib.ticker import MaxNLocator

    plt = _pyplot()

    panels = _panels(curves)
    n = max(1, len(panels))
    fig, axes = plt.subplots(1, n, figsize=(4.5 * n, 3.6), squeeze=False)
    for ax, (base, cols) in zip(axes[0], panels.items()):
        for col in cols:
            series = curves[col].dropna()
            label = "validation" if col.startswith("val_") else "evaluator" if col.startswith("eval_") else "train"
            ax.plot(series.index, series.values, marker="o", label=label)
        ax.set_title(base)
        ax.set_xlabel("epoch")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(alpha=0.3)
        ax.legend()
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return fig


def png_bytes(curves: pd.DataFrame, title: str = "") -> bytes:
    return fig_png(figure(curves, title))


def fig_png(fig) -> bytes:
    """A figure as PNG bytes (then closed)."""
    import io

    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    plt.close(fig)
    return buf.getvalue()


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
    left.legend()
    right.set_xlabel("workers")
    right.set_ylabel("scaling efficiency %")
    right.axhline(100, linestyle="--", color="gray")
    right.grid(alpha=0.3, axis="y")
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return fig
