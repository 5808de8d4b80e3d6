"""A task's scratch directory (checkpoint copies before upload, restores, exports, a script's snapshots) under a
per-run root on its node, and the sweep that removes those whose task is gone. No Ray, no TensorFlow.

A task killed by `ray.kill` (a failed attempt's teardown, a lost peer) never runs its `finally`, so its scratch
would stay behind with every attempt, without bound under failure.max_failures=-1. Each scratch directory
holds an exclusive flock on its `.owner` file for as long as its process lives (the kernel drops it when the
process dies, SIGKILL included); a directory whose lock can be taken has no owner and is removed by the next
sweep: the next task that starts on the node, and the driver at the end of each attempt.
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


def root() -> str:
    return os.path.join(tempfile.gettempdir(), ROOT_NAME)


class Scratch:
    """`<tmp>/raytf-scratch/<run>/<label>-XXXX/`, owned (flocked) by this process until `remove()`."""

    def __init__(self, run_name: str, label: str, base: str | None = None) -> None:
        parent = os.path.join(base or root(), run_name)
        for _ in range(10):  # a sweep may remove the run's (empty) directory between these two calls
            os.makedirs(parent, exist_ok=True)
            try:
                self.path = tempfile.mkdtemp(prefix=f"{label}-", dir=parent)
                break
            except FileNotFoundError:
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


def sweep(base: str | None = None) -> list[str]:
    """Remove every scratch directory on this node whose owner is gone (any run's), and runs' roots left empty.
    Returns what was removed."""
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

