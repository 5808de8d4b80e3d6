"""`raytf.plot`: a run's learning curves, or its step time per rank, as a figure (and a PNG file)."""

from __future__ import annotations

from typing import Any

from raytf._driver.figures import figure, learning_curves, prefetched, ranks_figure, size_changes
from raytf._driver.ranks import no_breakdown, rank_step_times


def plot(run: Any, out: str | None = None, *, ranks: bool = False):
    """Learning curves of a run (a Result, or a run directory path/URI), the group's size changes marked
    (elastic training); saved as PNG when `out` is given. With `ranks`, each rank's step time over time instead
    (attempts' starts marked): where a slow rank shows.

    Returns the matplotlib Figure (a notebook shows it).

    Raises:
        ValueError: `ranks` for a run without the step-time breakdown (an older raytf's, or no step rows yet).
    """
    from raytf.api.result import Result, load_result

    result = run if isinstance(run, Result) else load_result(str(run))
    prefetched()  # (a run's end may still be importing it in the background: figures.prefetch)
    import matplotlib.pyplot as plt

    title = result.summary.get("run", "")
    if ranks:
        metrics = result.metrics  # pandas once, for both calls
        why = no_breakdown(metrics)
        if why:
            raise ValueError(f"no step time per rank to plot for {result.run_dir}: {why}")
        fig = ranks_figure(rank_step_times(metrics), title=title)
    else:
        fig = figure(learning_curves(result.metrics_table), title=title,
                     resizes=size_changes(result.metrics_table))
    if out:
        fig.savefig(out, format="png", dpi=100)
    plt.close(fig)  # returned, not left open: a notebook then shows it once (as the cell's value)
    return fig
