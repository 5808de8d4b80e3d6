"""A standby task process's warm-up (raytf/_driver/standby.py), or a script's warm child's (script/spawn.py):
TensorFlow and tf-keras imported, quietly and on idle CPU, before the process is given a task or a script. No
TensorFlow at import: it is what this module imports."""

from __future__ import annotations

import os
import resource
import time


def import_tensorflow(idle: bool = True) -> float:
    """Import TensorFlow and tf-keras (the runtime_env's TF_USE_LEGACY_KERAS is set); the seconds it took.

    TensorFlow's start-up lines (oneDNN, CUDA drivers) belong to no task, so in no task's log; and never through
    Ray's log_to_driver to the user's terminal (raytf issue 21's quiet terminal): fds 1 and 2 go to /dev/null
    meanwhile. The import runs beside training (the pool refills while an attempt trains): on idle CPU only.
    Measured on 2 cores, two standbys importing at normal priority made the running job's steps 1.8x slower.
    Linux's setpriority(PRIO_PROCESS, 0) is this thread's; back to normal afterwards, which needs the right to
    raise a priority (root, or RLIMIT_NICE): without it, no lowering either (a task must not run niced). Not `idle`:
    at the normal priority (a task's own script child, whose import its first step waits for)."""
    began = time.monotonic()
    saved = [os.dup(1), os.dup(2)]
    null = os.open(os.devnull, os.O_WRONLY)
    nice = os.getpriority(os.PRIO_PROCESS, 0)
    lowered = idle and _may_raise_priority(nice)
    try:
        if lowered:
            os.setpriority(os.PRIO_PROCESS, 0, 19)
        for fd in (1, 2):
            os.dup2(null, fd)
        from raytf._task import tf_runtime  # imports TensorFlow

        tf_runtime.import_keras()
    finally:
        for fd, was in zip((1, 2), saved):
            os.dup2(was, fd)
            os.close(was)
        os.close(null)
        if lowered:
            os.setpriority(os.PRIO_PROCESS, 0, nice)
    return time.monotonic() - began


def _may_raise_priority(nice: int) -> bool:
    """Whether this process may go back to `nice` from 19 (root, or RLIMIT_NICE allows it: 20 - limit <= nice)."""
    if os.geteuid() == 0:
        return True
    soft, _ = resource.getrlimit(resource.RLIMIT_NICE)
    return soft == resource.RLIM_INFINITY or 20 - soft <= nice
