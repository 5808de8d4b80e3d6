"""A task's scratch directory (checkpoint copies before upload, restores, exports, a script's snapshots) under a
per-run root on its node, and the sweep that removes those whose task is gone. No Ray, no TensorFlow.

A task killed by `ray.kill` (a failed attempt's teardown, a lost peer) never runs its `finally`, so its scratch
would stay behind with every attempt, without bound under failure.max_failures=-1. Each scratch directory
holds an exclusive flock on its `.owner` file for as long as its process lives (the kernel drops it when the
process dies, SIGKILL included); a directory whose lock can be taken has no owner and is removed by the next
sweep: the next task that starts on the node, and the driver at the end of each attempt.

Each task process's temporary directory (TMPDIR, `tempfile.tempdir`) is one of these too (`own_tempdir`, first thing
in the actor's start): what TensorFlow and Python put in "the temporary directory" (autograph's
`__autograph_generated_file*.py`, deleted only at the interpreter's exit, which `ray.kill` skips; a task's log before
its upload; a script's data socket; a multiprocessing directory) is swept with it. A script's process inherits it.
"""

from __future__ import annotations

import fcntl
import logging
import os
import shutil
import tempfile
import time

log = logging.getLogger(__name__)

ROOT_NAME = "raytf-scratch"
_OWNER = ".owner"
# The root, as resolved before this process's temporary directory was pointed into it (inherited by a script's
# process): root() must not move into the process's own directory.
ROOT_ENV = "RAYTF_SCRATCH_ROOT"
# The scratch "run" that holds the task processes' own temporary directories.
PROCESSES = "proc"


def root() -> str:
    return os.environ.get(ROOT_ENV) or os.path.join(tempfile.gettempdir(), ROOT_NAME)


class Scratch:
    """`<tmp>/raytf-scratch/<run>/<label>-XXXX/`, owned (flocked) by this process until `remove()`."""

    def __init__(self, run_name: str, label: str, base: str | None = None) -> None:
        parent = os.path.join(base or root(), run_name)
        for _ in range(10):  # a sweep may remove the run's (empty) directory between these two calls
            try:
                os.makedirs(parent, exist_ok=True)
                self.path = tempfile.mkdtemp(prefix=f"{label}-", dir=parent)
                break
            # (FileExistsError: os.makedirs's own race, a directory that existed at its mkdir and was swept before
            # its isdir() looked: raytf issue 71, a relaunch's task failed on it, blamed on the program)
            except (FileNotFoundError, FileExistsError):
                continue
        else:
            raise OSError(f"could not make a scratch directory in {parent}")
        self._owner = os.open(os.path.join(self.path, _OWNER), os.O_CREAT | os.O_RDWR, 0o600)
        fcntl.flock(self._owner, fcntl.LOCK_EX)
        # Only now, holding the lock, does the owner sign it: a sweep that takes the lock of an unsigned file
        # has come between its creation and its locking (not a dead owner), and leaves it alone.
        os.write(self._owner, f"{os.getpid()}\n".encode())

    @classmethod
    def adopt(cls, path: str) -> Scratch:
        """Own `path`, a scratch directory whose owner died, as this process's (a restarted tf.data service dispatcher
        taking its predecessor's journal). OSError when it is gone (swept) or its owner still lives."""
        self = cls.__new__(cls)
        self.path = path
        self._owner = os.open(os.path.join(path, _OWNER), os.O_RDWR)  # (never made anew: a sweep may have run)
        try:
            fcntl.flock(self._owner, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(self._owner)
            raise OSError(f"{path} is owned by a live process") from None
        os.ftruncate(self._owner, 0)
        os.write(self._owner, f"{os.getpid()}\n".encode())
        return self

    def remove(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)
        if self._owner >= 0:
            os.close(self._owner)
            self._owner = -1


_own: Scratch | None = None


def own_tempdir() -> str:
    """Point this process's temporary directory (TMPDIR for what it starts, `tempfile.tempdir` for itself) into a
    scratch directory it owns, `<root>/proc/<pid>-XXXX/` (short: a Unix socket's path must fit in 108 bytes), swept
    once the process is gone. Call it first, before TensorFlow is imported (idempotent); returns the directory."""
    global _own
    if _own is None:
        base = root()
        _own = Scratch(PROCESSES, str(os.getpid()), base=base)
        os.environ[ROOT_ENV] = base
        os.environ["TMPDIR"] = _own.path
        tempfile.tempdir = _own.path
    return _own.path


def wait_gone(pids, timeout_s: float = 3.0) -> None:
    """Until none of `pids` is a live process on this node, at most `timeout_s` (`ray.kill` returns before the
    killed process is gone, and a directory is swept only once its owner is)."""
    deadline = time.monotonic() + timeout_s
    left = set(pids)
    while left and time.monotonic() < deadline:
        for pid in list(left):
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                left.discard(pid)
            except PermissionError:  # alive, another user's (a reused pid): not ours to wait for
                left.discard(pid)
        if left:
            time.sleep(0.05)  # polling the process table, bounded by timeout_s


def place() -> str:
    """Where and as whom this process sees files and processes: the machine (its boot), its mount and PID namespaces
    and its user. Two processes of one place name the same directory by the same path and the same process by the
    same pid, with the same rights, so one can sweep the other's scratch root (`sweep`, `wait_gone`). "" where the
    kernel does not say (no /proc): then no other process shares it."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip()
        return ":".join((boot, os.readlink("/proc/self/ns/mnt"), os.readlink("/proc/self/ns/pid"), str(os.getuid())))
    except OSError:
        return ""


def sweep(base: str | None = None, drop_root: bool | None = None) -> list[str]:
    """Remove every scratch directory under `base` (this process's root) whose owner is gone (any run's), runs'
    roots left empty and, with `drop_root` (the default for this process's own root), the root itself if empty.
    Returns what was removed."""
    own_root = base is None if drop_root is None else drop_root
    base = base or root()
    removed = []
    try:
        runs = os.listdir(base)
    except FileNotFoundError:
        return removed
    for run in runs:
        run_dir = os.path.join(base, run)
        try:
            entries = os.listdir(run_dir)
        except (NotADirectoryError, FileNotFoundError):
            continue
        for name in entries:
            path = os.path.join(run_dir, name)
            if _ownerless(path):
                shutil.rmtree(path, ignore_errors=True)
                removed.append(path)
        try:
            os.rmdir(run_dir)  # only if empty: another task of that run may still be working
        except OSError:
            pass
    if own_root:
        try:
            os.rmdir(base)  # nothing left in the temporary directory (a Scratch being made retries: see __init__)
        except OSError:
            pass
    return removed


def leftovers(run_name: str, base: str | None = None) -> list[str]:
    """A run's scratch directories on this node whose task is gone (what a sweep would remove)."""
    run_dir = os.path.join(base or root(), run_name)
    try:
        names = os.listdir(run_dir)
    except FileNotFoundError:
        return []
    return sorted(p for p in (os.path.join(run_dir, n) for n in names) if _ownerless(p))


def _ownerless(path: str) -> bool:
    try:
        fd = os.open(os.path.join(path, _OWNER), os.O_RDWR)
    except FileNotFoundError:
        # Being created (mkdtemp, then the lock a moment later) or from an older raytf: leave it to its age.
        try:
            return os.path.getmtime(path) < time.time() - 3600
        except OSError:
            return False
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return False  # its owner lives
    try:
        signed = os.read(fd, 64).strip() != b""
        # Unsigned: its owner is between creating the file and locking it (or died right there: then old).
        return signed or os.path.getmtime(path) < time.time() - 3600
    finally:
        os.close(fd)

