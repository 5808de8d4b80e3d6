"""A Ray worker process forked from a node's template (template.py), in the child: made what Ray's own start of it
would have made (the shim's standard streams, environment, directory and sys.path), then Ray's default_worker.py is
run as `__main__`, as `python default_worker.py ...` runs it. TensorFlow and tf-keras are imported already: a training
function's task that Ray starts in such a process builds its strategy at once (raytf issue 53).

How it gets here: the task actor's runtime_env names worker_shim.py as its `py_executable`, so Ray execs the shim
where it would exec Python; the shim asks the node's template for this process (protocol.ForkRequest, kind WORKER)
and lives as long as it. Ray's raylet takes the pid a worker registers with, not the pid it started, as the worker's
from then on: it kills, watches and measures this process, not the shim (a shim's container runtimes rely on the
same: ray-project/ray#18951). Nothing of Ray runs in the template before the fork: its import starts no thread and
no gRPC channel (Ray's dashboard forks its own processes from one that imported it: ray-project/ray#65159); the core
worker starts here, after it."""

from __future__ import annotations

import importlib
import logging
import os
import runpy
import sys
from typing import TYPE_CHECKING

from raytf._task.script import protocol

if TYPE_CHECKING:  # (template.py imports this module: it runs main_forked in the children it forks for Ray)
    from raytf._task.script import template

# What Ray's raylet writes for each Python worker it starts (worker_pool.cc): this process, not the shim, is the one
# the kernel's OOM killer should take first, as for any other worker.
_OOM_SCORE_ADJ = "1000"


def main_forked(forked: template.Forked) -> int:
    """The Ray worker the template forked for a shim (template.main, in the child); its exit code."""
    request = forked.request
    for to, name in enumerate(protocol.WORKER_FDS):
        fd = forked.fds[name]
        if fd != to:
            os.dup2(fd, to)
            os.close(fd)
    try:
        with open("/proc/self/oom_score_adj", "w") as f:
            f.write(_OOM_SCORE_ADJ)
    except OSError:  # (not Linux, or not allowed: the template's score, as a worker Ray cannot write it for)
        pass
    was_cwd, was_pythonpath = os.getcwd(), os.environ.get("PYTHONPATH", "")
    env = dict(request.env or {})
    # What TensorFlow's import set in the template's environment a fresh worker's import would set too; Ray's wins.
    env = {**{k: v for k, v in os.environ.items() if forked.before.get(k) != v}, **env}
    os.environ.clear()
    os.environ.update(env)
    os.chdir(request.cwd)
    # `python default_worker.py`: its directory first, then PYTHONPATH's entries (a runtime_env's working_dir and
    # py_modules are there), then what every interpreter of this environment has.
    sys.path[:] = protocol.rebased_path(sys.path, was_cwd=was_cwd, cwd=os.path.dirname(request.argv[0]),
                                        was_pythonpath=was_pythonpath, pythonpath=env.get("PYTHONPATH", ""))
    importlib.invalidate_caches()
    _fresh_logging()
    sys.argv = list(request.argv)
    try:
        runpy.run_path(request.argv[0], run_name="__main__")
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    return 0


def _fresh_logging() -> None:
    """raytf's logger as a new process has it: the template's own handler (its warnings on its keeper's stderr:
    child.own_logging) is not the worker's, whose task sets up its own (call.task_logging)."""
    logger = logging.getLogger("raytf")
    for handler in list(logger.handlers):
        logger.removeHandler(handler)
    logger.setLevel(logging.NOTSET)
    logger.propagate = True
