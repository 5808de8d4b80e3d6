"""A standby task process's warm-up (raytf/_driver/standby.py), or a script's warm child's (script/spawn.py):
TensorFlow and tf-keras imported, quietly and on idle CPU, before the process is given a task or a script. No
TensorFlow at import: it is what this module imports."""

from __future__ import annotations

import contextlib
import os
import resource
import time
from collections.abc import Iterator

_LOWEST = 19


def import_tensorflow(idle: bool = True) -> float:
    """Import TensorFlow and tf-keras (the runtime_env's TF_USE_LEGACY_KERAS is set); the seconds it took.

    TensorFlow's start-up lines (oneDNN, CUDA drivers) belong to no task, so in no task's log; and never through
    Ray's log_to_driver to the user's terminal (raytf issue 21's quiet terminal): fds 1 and 2 go to /dev/null
    meanwhile. The import runs beside training (the pool refills while an attempt trains): on idle CPU only
    (`idle_cpu`). Measured on 2 cores, two standbys importing at normal priority made the running job's steps 1.8x
    slower. Not `idle`: at the normal priority (a task's own script child, whose import its first step waits for)."""
    began = time.monotonic()
    saved = [os.dup(1), os.dup(2)]
    null = os.open(os.devnull, os.O_WRONLY)
    try:
        with idle_cpu(idle):
            for fd in (1, 2):
                os.dup2(null, fd)
            from raytf._task import tf_runtime  # imports TensorFlow

            tf_runtime.import_keras()
    finally:
        for fd, was in zip((1, 2), saved):
            os.dup2(was, fd)
            os.close(was)
        os.close(null)
    return time.monotonic() - began


@contextlib.contextmanager
def idle_cpu(idle: bool = True) -> Iterator[None]:
    """Run the block at the lowest CPU priority (when `idle`), then put back this process's priority: this thread's,
    and every thread started meanwhile's.

    Linux's setpriority(PRIO_PROCESS, 0) is the calling thread's, and a thread inherits its creator's priority:
    TensorFlow's import starts threads of its own (3 here: jemalloc's background thread and two more), which would
    otherwise run at the lowest priority for the rest of the process's life, the training that follows included.
    Back to normal needs the right to raise a priority (root, or RLIMIT_NICE): without it, no lowering either (a task
    must not run niced)."""
    nice = os.getpriority(os.PRIO_PROCESS, 0)
    lowered = idle and _may_raise_priority(nice)
    before = threads()
    if lowered:
        os.setpriority(os.PRIO_PROCESS, 0, _LOWEST)
    try:
        yield
    finally:
        if lowered:
            os.setpriority(os.PRIO_PROCESS, 0, nice)
            for tid in threads() - before:
                with contextlib.suppress(ProcessLookupError):  # (ended since)
                    os.setpriority(os.PRIO_PROCESS, tid, nice)


def threads() -> set[int]:
    """This process's threads' ids (Linux's /proc; elsewhere none are known, and PRIO_PROCESS is the process's)."""
    try:
        return {int(tid) for tid in os.listdir("/proc/self/task")}
    except FileNotFoundError:
        return set()


def _may_raise_priority(nice: int) -> bool:
    """Whether this process may go back to `nice` from 19 (root, or RLIMIT_NICE allows it: 20 - limit <= nice)."""
    if os.geteuid() == 0:
        return True
    soft, _ = resource.getrlimit(resource.RLIMIT_NICE)
    return soft == resource.RLIM_INFINITY or 20 - soft <= nice
