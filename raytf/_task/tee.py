"""Tee a task's stdout and stderr into its per-rank log file. No Ray, no TensorFlow."""

from __future__ import annotations

import logging
import os
import shutil
import sys
import tempfile
import threading
from typing import BinaryIO

from raytf._storage import RunDir
from raytf.errors import RaytfError

log = logging.getLogger(__name__)


def _write_all(write, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[write(view):]


def pump(read_end: int, original: int, file: BinaryIO, path: str) -> None:
    """Copy what arrives on `read_end` to the `original` fd and to `file` until EOF. A sink whose write fails is
    dropped, with one line on the other saying so; the reading never stops: a pipe nobody drains blocks every
    print of the task (and TF's C++ logging), which would look like a hang."""
    to_original, to_file = True, True
    while chunk := os.read(read_end, 65536):
        if to_original:
            try:
                _write_all(lambda b: os.write(original, b), chunk)
            except OSError as e:
                to_original = False
                chunk += f"[raytf] output no longer forwarded to Ray's log ({e}); only to this file\n".encode()
        if to_file:
            try:
                _write_all(file.write, chunk)
            except (OSError, ValueError) as e:  # ValueError: the file was closed under us
                to_file = False
                if to_original:
                    try:
                        os.write(original, f"raytf: task log {path} no longer written: {e}\n".encode())
                    except OSError:
                        to_original = False
    os.close(read_end)


def open_log(path: str):
    """The task's log file for appending, unbuffered. Never through a symlink: a run directory others can write
    to could point the log at a file of this user's (O_NOFOLLOW; raytf issue 19)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o644)
    except OSError:
        if os.path.islink(path):
            raise RaytfError(f"{path} is a symlink: a task log is never written through one (a planted link "
                             f"would redirect it). Fix: remove it") from None
        raise
    return os.fdopen(fd, "ab", buffering=0)


class OutputCapture:
    """Tee this process's stdout and stderr (fds 1 and 2: Python prints and TF's C++ logs alike) into a
    per-rank log file, while Ray's own capture (worker logs, log_to_driver) keeps seeing everything.

    On a local run directory the file is written in place (readable while the run goes); on an object
    store it is written locally and uploaded by `close()`."""

    def __init__(self, run_dir: RunDir, rel: str) -> None:
        import pyarrow.fs as pafs

        self.run_dir, self.rel = run_dir, rel
        self.local = isinstance(run_dir.fs, pafs.LocalFileSystem)
        path = run_dir.path(rel) if self.local else os.path.join(tempfile.mkdtemp(prefix="raytf-log-"), "task.log")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        self.path = path
        self.file = open_log(path)
        self._streams = []
        for fd in (1, 2):
            sys.stdout.flush() if fd == 1 else sys.stderr.flush()
            read_end, write_end = os.pipe()
            original = os.dup(fd)
            os.dup2(write_end, fd)
            os.close(write_end)
            t = threading.Thread(target=self._pump, args=(read_end, original), daemon=True,
                                 name=f"raytf-tee-{fd}")
            t.start()
            self._streams.append((fd, original, t))

    def _pump(self, read_end: int, original: int) -> None:
        pump(read_end, original, self.file, self.path)

    def close(self) -> None:
        sys.stdout.flush()
        sys.stderr.flush()
        for fd, original, t in self._streams:
            os.dup2(original, fd)  # closes the pipe's last write end: the pump sees EOF
            t.join(timeout=5)
            os.close(original)
        self._streams = []
        self.file.close()
        if not self.local:
            try:  # streamed: the log may be far larger than this process should hold
                self.run_dir.upload_file(self.path, self.rel, retry=False)
            except (OSError, RaytfError) as e:
                log.warning("task log not uploaded to %s: %s", self.run_dir.uri_of(self.rel), e)
            shutil.rmtree(os.path.dirname(self.path), ignore_errors=True)
