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
    return name in BREAKDOWN or name == "steps_per_s" or is_gpu_column(name)
