"""Where a rank's step time goes, pure: the breakdown columns every step row carries, and GPU columns.

Every step row (metrics.every_steps) carries, per step, averaged over the steps since the rank's previous row:
  step_time_s    wall time of a step, everything included
  input_wait_s   blocked in the input iterator's get_next (the step waiting for its batch)
  collective_s   MWMS: from this rank's gradients being ready to the all-reduce being done (waiting for slower
                 peers, and the transfer)
  save_s         writing checkpoints (what the training thread waits for; uploads run beside it)
  compute_s      the rest: the model's own work, the program's Python, callbacks
A part that cannot be measured for a rank is left out of its rows (null in metrics.parquet), never guessed.
"""

from __future__ import annotations

STEP_TIME = "step_time_s"
INPUT_WAIT = "input_wait_s"
COLLECTIVE = "collective_s"
SAVE = "save_s"
COMPUTE = "compute_s"
BREAKDOWN = (STEP_TIME, INPUT_WAIT, COLLECTIVE, SAVE, COMPUTE)

# The task's resident memory (its process's RSS, GiB), sampled at every step row: what failure.max_task_rss_gb
# watches (_core/memory.py).
RSS = "rss_gib"

# GPU use, sampled every reporting interval on tasks that have GPUs: device i of the task's visible ones.
GPU_PREFIX = "gpu"


def gpu_util(i: int) -> str:
    """Utilisation of the task's GPU `i` over the last sample period, percent (NVML's gpu utilisation)."""
    return f"gpu{i}_util"


def gpu_mem(i: int) -> str:
    """Memory used on the task's GPU `i`, GiB."""
    return f"gpu{i}_mem_gib"


def is_gpu_column(name: str) -> bool:
    return name.startswith(GPU_PREFIX) and (name.endswith("_util") or name.endswith("_mem_gib"))


def is_timing(name: str) -> bool:
    """A column raytf measures about the run (not one of the model's metrics): kept out of learning curves and
    the progress bar's metrics."""
    return name in BREAKDOWN or name in ("steps_per_s", RSS) or is_gpu_column(name)


class Split:
    """A rank's step time split into parts, per step row: `totals()` gives the seconds spent so far in each part
    measured (input_wait_s, collective_s, save_s; whichever the task can measure), `row(elapsed, steps)` the
    columns for the `steps` steps of the last `elapsed` seconds, from the totals' growth since the previous row (or
    `mark`). compute_s is what the measured parts leave of the step; with no part measured there is nothing to
    split, and only step_time_s is given."""

    def __init__(self, totals) -> None:
        self._totals = totals
        self._last: dict[str, float] = dict(totals())

    def mark(self) -> None:
        """Start the next row's interval here (what was spent before is nobody's)."""
        self._last = dict(self._totals())

    def row(self, elapsed: float, steps: int) -> dict[str, float]:
        now = dict(self._totals())
        grown = {k: max(0.0, v - self._last.get(k, 0.0)) for k, v in now.items()}
        self._last = now
        if steps <= 0 or elapsed <= 0:
            return {}
        out = {STEP_TIME: elapsed / steps}
        if grown:
            for k, v in grown.items():
                out[k] = min(v, elapsed) / steps
            # The all-reduce packs of one step may overlap, and a clock read late can overshoot: never below 0.
            out[COMPUTE] = max(0.0, elapsed - sum(grown.values())) / steps
        return out
