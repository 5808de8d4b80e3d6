"""`raytf.plot`: a run's learning curves as a figure (and a PNG file)."""

from __future__ import annotations

from typing import Any

from raytf._core.figures import figure, learning_curves, size_changes


def plot(run: Any, out: str | None = None):
    """Learning curves of a run (a Result, or a run directory path/URI), the group's size changes marked
    (elastic training); saved as PNG when `out` is given.

    Returns the matplotlib Figure (a notebook shows it)."""
    from raytf.api.result import Result, load_result

    result = run if isinstance(run, Result) else load_result(str(run))
    curves = learning_curves(result.metrics_table)
    import matplotlib.pyplot as plt

    fig = figure(curves, title=result.summary.get("run", ""), resizes=size_changes(result.metrics_table))
    if out:
        fig.savefig(out, format="png", dpi=100)
    plt.close(fig)  # returned, not left open: a notebook then shows it once (as the cell's value)
    return fig
