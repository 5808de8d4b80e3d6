"""What a script-mode task's child process runs (`python -m raytf._task.script.child`): set up what an unmodified
script cannot do for itself, then run it as `__main__` with its own argv, and exit with its exit code.

Before the script: die with the host, and leave a sentinel that takes the script's process group down with
it (no orphans when Ray kills the actor), keep raytf's TF_CONFIG even if
the script assigns its own, cap TensorFlow's threads to the task's CPU share, and add raytf's metrics
callback to every Keras `Model.fit` (patches.py). TF_USE_LEGACY_KERAS=1 is already in the environment (the actor's
runtime_env), so `tf.keras` is tf-keras here.

Or, with `--warm` (script/spawn.py's WarmChild: a standby's, or a task's started beside its actor's start), the same
process is started before its script is known: it imports TensorFlow and tf-keras first, then waits for the script
and the environment it runs in, so the script starts as a training function does in a standby process.
"""

from __future__ import annotations

import atexit
import ctypes
import gc
import importlib
import json
import logging
import os
import runpy
import signal
import socket
import sys
import traceback

from raytf._core import tracebacks
from raytf._task import keras3
from raytf._task.script import leaving, patches, protocol
from raytf._task.script.protocol import ChildSpec

_PR_SET_PDEATHSIG = 1


def _die_with_parent(parent_pid: int) -> None:
    """SIGKILL this process when its host dies (ray.kill, a lost node): Linux's parent-death signal. Set
    here rather than in Popen(preexec_fn=...), which is unsafe in the threaded actor process."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):  # not Linux: the host kills the group on its way out instead
        return
    if os.getppid() != parent_pid:  # the host died before the signal was armed
        os._exit(137)


def _start_sentinel(alive_fd: int) -> None:
    """Fork a small process that takes this process group down once the host is gone or done with it.

    The host started this process in a session of its own, so whatever the script starts (a TensorBoard,
    os.system, forked workers) is in its group. The host kills the group when the script ends; but when
    the host itself is killed (ray.kill of the actor, whose exit also SIGKILLs its direct children, this
    process among them), nobody is left to do it. The sentinel, a grandchild of the host, is not killed
    with it: it waits for the host's end of `alive_fd` to close, which any death of the host does, then
    kills the group. Forked before anything starts a thread (TensorFlow)."""
    from raytf._task.script.spawn import kill_session

    if os.fork() == 0:
        try:
            devnull = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):  # hold none of the script's pipes (the host waits for their EOF)
                os.dup2(devnull, fd)
            os.closerange(3, alive_fd)
            os.closerange(alive_fd + 1, 1 << 16)
            while os.read(alive_fd, 1):  # nothing is ever written: returns b"" when the host's end closes
                pass
        finally:
            kill_session(os.getsid(0), but=os.getpid())  # (every group of the script's session, then its own)
            os.killpg(0, signal.SIGKILL)
            os._exit(0)
    os.close(alive_fd)


# os._Environ is Python's private class (raytf/_core/private_apis.py, ENVIRON): checked before use (_guard_tf_config).
_Environ = getattr(os, "_Environ", object)


class _GuardedEnviron(_Environ):
    """os.environ that keeps raytf's TF_CONFIG. A script written for launching by hand assigns its own
    (hard-coded hosts and ports); raytf's is built from the addresses the tasks actually hold, so it wins,
    and the script is told which line was ignored."""

    _warned: set = set()

    def _refuse(self, what: str) -> None:
        frame = sys._getframe(2)
        while frame is not None and frame.f_code.co_filename.endswith(("os.py", "_collections_abc.py",
                                                                         "_collections_abc>")):
            frame = frame.f_back  # os.environ.update(...) and friends: name the script's line
        where = f"{frame.f_code.co_filename}:{frame.f_lineno}" if frame else "the script"
        if where not in self._warned:
            self._warned.add(where)
            print(f"raytf: {where} {what} TF_CONFIG: ignored. raytf's TF_CONFIG (built from the tasks' "
                  "actual addresses) stays in effect; that line is only needed when launching by hand",
                  file=sys.stderr, flush=True)

    def __setitem__(self, key, value):
        if key == "TF_CONFIG" and "TF_CONFIG" in self and value != self["TF_CONFIG"]:
            self._refuse("sets")
            return
        super().__setitem__(key, value)

    def __delitem__(self, key):
        if key == "TF_CONFIG":
            self._refuse("deletes")
            return
        super().__delitem__(key)

    # MutableMapping's clear() and popitem() delete the first key until none is left: with TF_CONFIG
    # kept, they would loop forever. Everything else goes; TF_CONFIG stays (and the script is told).
    def clear(self):
        for key in [k for k in self if k != "TF_CONFIG"]:
            super().__delitem__(key)
        if "TF_CONFIG" in self:
            self._refuse("clears")

    def popitem(self):
        for key in self:
            if key != "TF_CONFIG":
                return key, self.pop(key)
        raise KeyError("popitem(): only raytf's TF_CONFIG is left, and it stays")


def _exit_code(code) -> int:
    """sys.exit's argument as a process exit code, the way Python itself maps it."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def _run(spec: ChildSpec) -> None:
    if spec.module:
        sys.argv = [spec.module, *spec.args]
        runpy.run_module(spec.module, run_name="__main__", alter_sys=True)
    else:
        script = spec.script
        sys.argv = [script, *spec.args]
        sys.path.insert(0, os.path.dirname(os.path.abspath(script)))  # as `python script.py` does
        runpy.run_path(script, run_name="__main__")


def _own_logging() -> None:
    """raytf's own warnings in this process (an optional feature turned off, say) on the script's stderr as
    `raytf: ...`, which the host tells apart from the script's lines and shows from every rank."""
    logger = logging.getLogger("raytf")
    if not logger.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("raytf: %(message)s"))
        logger.addHandler(handler)
        logger.setLevel(logging.WARNING)
        logger.propagate = False


def _guard_tf_config() -> None:
    """os.environ keeps raytf's TF_CONFIG (`_GuardedEnviron`), where Python's os._Environ is as raytf knows it."""
    from raytf._core import private_apis as apis

    if "TF_CONFIG" not in os.environ or not apis.available(apis.TF_CONFIG_GUARD, logging.getLogger("raytf").warning):
        return
    try:
        os.environ.__class__ = _GuardedEnviron
    except TypeError as e:  # an os.environ whose class cannot be swapped: the script's own TF_CONFIG would win
        apis.SWITCHES.turn_off(apis.ENVIRON, f"changed ({e})", logging.getLogger("raytf").warning)


def _warm_start() -> ChildSpec | None:
    """`--warm` (spawn.WarmChild): what a cold child does before TensorFlow's import (die with the host, the
    sentinel), then the import, on idle CPU (warm.import_tensorflow), then wait for the script: its Handoff takes
    this process to where a cold child for it would have started (its environment, directory and sys.path). None
    when the host lets it go unused (the control socket closed)."""
    start = protocol.WarmStart.from_env()
    _die_with_parent(start.parent_pid)
    _start_sentinel(start.alive_fd)
    os.set_inheritable(start.control_fd, False)  # the script's processes hold no end of it
    from raytf._task import warm

    before = dict(os.environ)
    with socket.socket(fileno=start.control_fd) as control:
        control.sendall(json.dumps({"import_s": warm.import_tensorflow(idle=start.idle)}).encode() + b"\n")
        with control.makefile("rb") as f:
            line = f.readline()
    if not line:
        return None
    handoff = protocol.Handoff.decode(line)
    # What TensorFlow's import set in the environment (TF2_BEHAVIOR, TPU_ML_PLATFORM, h5py's HDF5_PLUGIN_PATH, ...)
    # a cold child's script sees too; the script's own environment wins where it sets the same.
    env = {**{k: v for k, v in os.environ.items() if before.get(k) != v}, **handoff.env}
    was_cwd, was_pythonpath = os.getcwd(), os.environ.get("PYTHONPATH", "")
    os.chdir(handoff.cwd)
    for key in [k for k in os.environ if k not in env]:
        del os.environ[key]
    os.environ.update(env)
    sys.path[:] = protocol.rebased_path(sys.path, was_cwd=was_cwd, cwd=handoff.cwd, was_pythonpath=was_pythonpath,
                                        pythonpath=handoff.env.get("PYTHONPATH", ""))
    importlib.invalidate_caches()
    return handoff.spec


def main(argv: list[str] | None = None) -> int:
    _own_logging()
    if "--warm" in (sys.argv[1:] if argv is None else argv):
        spec = _warm_start()
        if spec is None:
            return 0
    else:
        spec = ChildSpec.from_env()
        _die_with_parent(spec.parent_pid)
        _start_sentinel(spec.alive_fd)
    # The events pipe is ours: a process the script starts (os.system, a TensorBoard) must not hold it open.
    os.set_inheritable(spec.events_fd, False)
    from raytf._task import report
    from raytf._task.script.reporter import ScriptReporter

    reporter = ScriptReporter(
        spec.events_fd, every_steps=spec.every_steps, heartbeat_s=spec.heartbeat_s, is_chief=spec.is_chief,
        checkpoint_dir=spec.checkpoint_dir, scratch=spec.scratch, epoch=spec.epoch, step=spec.step,
        max_names=spec.max_names)
    report.set_sink(reporter)
    from raytf._task import rss
    from raytf._task.gpu import GpuSampler

    reporter.sources.append(rss.sample)  # (the script's own process: what failure.max_task_rss_gb watches)
    # The script's stderr is where this process speaks (as the TF_CONFIG guard does); no logging is set up here.
    gpus = GpuSampler.for_task(os.environ.get("CUDA_VISIBLE_DEVICES"),
                               log=lambda msg: print(f"raytf: {msg}", file=sys.stderr, flush=True))
    if gpus is not None:
        reporter.sources.append(gpus.sample)
    _guard_tf_config()
    from raytf._core.private_apis import PrivateApiMissing
    from raytf._task import tf_runtime  # imports TensorFlow

    tf_runtime.configure(spec.threads, spec.gpu_memory_growth)
    try:
        tf_runtime.keep_own_writes(spec.scratch)
    except PrivateApiMissing as e:  # refused at start, one line; a configuration failure (failure.CONFIG_ERRORS)
        print(f"raytf: {e}", file=sys.stderr, flush=True)
        reporter.exception(type(e).__name__)
        reporter.close(ok=False)
        return 1
    patches.keras_fit(reporter)
    patches.checkpoint_manager(reporter)
    # The script's own `import keras`: Keras 3's fit corrected or refused on a cluster (_task/keras3.py), with
    # raytf's callback as tf-keras's fit has it.
    keras3.install(patches.script_callback_adder(reporter))
    from raytf._task import timing

    reporter.split = timing.split(spec.timing)  # installed before the script traces its step
    # What TensorFlow's, tf-keras' and raytf's imports made lives as long as the process: out of the collector's
    # sight from now on (https://docs.python.org/3/library/gc.html#gc.freeze). The interpreter's exit otherwise
    # traverses all of it in its final collections: ~1.1 s a process here (`import tensorflow`, then exit: 1.24 s
    # -> 0.14 s with a Keras fit), which the host, and the run's end, wait for. The script's own objects, made after
    # this, are collected (and finalized at exit) as they would be anyway.
    gc.freeze()
    atexit.register(leaving.past_teardowns)  # (before the script's own exit handlers: it runs after them)
    code = 0
    try:
        _run(spec)
    except SystemExit as e:
        code = _exit_code(e.code)
    except keras3.Keras3Unsupported as e:
        # raytf's own refusal: its one line is the run's last (the driver's), with no traceback through raytf's
        # frames (child.py, runpy, keras3.py) and no second copy of it from this worker's stderr (raytf issue 72).
        code = 1
        reporter.exception(type(e).__name__, f"{type(e).__name__}: {e}")
    except BaseException as e:
        traceback.print_exc()
        code = 1
        # The exception's type decides retries (a lost peer's UnavailableError is not the script's fault);
        # sent as such, since a long TF message can push it out of the stderr lines the host keeps; with the
        # failure in a few lines, not the data its message may dump (raytf issue 54).
        reporter.exception(type(e).__name__, tracebacks.summary(type(e).__name__, f"{e}", tracebacks.own_frames_of(e)))
    try:
        reporter.close(ok=code == 0)
    except OSError as e:
        print(f"raytf: the final checkpoint sync failed: {e}", file=sys.stderr)
        code = code or 1
    if gpus is not None:
        gpus.close()
    leaving.status = code
    return code


if __name__ == "__main__":
    sys.exit(main())
