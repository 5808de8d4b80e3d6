"""A hung task's Python stacks: py-spy run on the task's own node (its process and a script's child), the dump
logged, saved in the run directory and named in the attempt's error. Imports Ray, never TensorFlow."""

from __future__ import annotations

import logging
import sys

import ray
from ray.exceptions import RayError
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from raytf._core import failure
from raytf._core.tasks import TaskInfo
from raytf._storage import RunDir
from raytf.errors import RaytfError, WorkerError

log = logging.getLogger("raytf")


@ray.remote(num_cpus=0)
def _py_spy_dump(pid: int) -> str:
    """Runs on the stuck task's node: py-spy (installed with ray[default]) reads its Python stacks."""
    import subprocess

    from raytf._core.finder import find_program

    exe = find_program("py-spy")  # beside this interpreter first: its environment need not be on PATH (issue 50)
    if exe is None:
        return f"py-spy is not installed on this node (not beside {sys.executable}, nor on PATH)"
    # --subprocesses: in script mode the user's program runs in a child process of the task's actor.
    proc = subprocess.run([exe, "dump", "--subprocesses", "--pid", str(pid)], capture_output=True, text=True,
                          timeout=30)
    return proc.stdout or proc.stderr


def dump(info: TaskInfo | None, rank: int) -> str:
    """The task's stacks (or why there are none), read on its own node."""
    if info is None:
        return f"could not dump stacks: rank {rank} never reported where it runs"
    try:
        return ray.get(_py_spy_dump.options(scheduling_strategy=NodeAffinitySchedulingStrategy(
            info.node_id, soft=False)).remote(info.pid), timeout=60)
    except RayError as e:
        return f"could not dump stacks: {e}"


def hang_error(info: TaskInfo | None, rank: int, attempt: int, timeout_s: float, run_dir: RunDir, *,
               busy_with: str | None = None) -> WorkerError:
    """A rank without progress for failure.hang_timeout_s (`timeout_s`), or busy past its allowance (`busy_with`):
    its stacks go to the driver's log and to `logs/stacks-attempt<N>-<role><index>.txt`, and the error says where."""
    role, index, pid = (info.role, info.index, info.pid) if info is not None else (None, rank, None)
    rel = f"logs/stacks-attempt{attempt}-{role}{index}.txt"
    text = dump(info, rank)
    log.error("stacks of %s %s (pid %s):\n%s", role, rank, pid, text)
    where = run_dir.uri_of(rel)
    try:
        run_dir.write_text(rel, text)
    except (RaytfError, OSError) as e:  # the hang is the error to report, not the storage's
        log.warning("stacks not saved to %s: %s", where, e)
        where = "the driver's log"
    why = (f"still {busy_with} past its allowance (failure.hang_timeout_s={timeout_s:g}s plus its bytes at "
           f"storage.min_upload_mib_s)" if busy_with else f"no progress for {timeout_s:g}s (failure.hang_timeout_s)")
    return WorkerError(f"{why}; stacks in {where}", role=role or "", rank=rank,
                       node_id=info.node_id if info is not None else "", kind=failure.HANG)
