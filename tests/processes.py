"""Processes a script-mode task leaves behind, found by their command lines (Linux /proc)."""

import os
import select
import time
from pathlib import Path


def _children() -> list[int]:
    """Script-mode child processes (and the helpers test scripts start) still alive here (Linux /proc)."""
    pids = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if any(mark in cmdline.read_bytes() for mark in (b"raytf._task.script.child", b"raytf-test-helper")):
                pids.append(int(cmdline.parent.name))
        except OSError:  # exited while we looked
            continue
    return pids


def leftover_script_processes(timeout_s: float = 15.0) -> list[int]:
    """_children() once they have had `timeout_s` to go: a torn-down task's processes die asynchronously
    (the actor's exit closes the pipe its script's sentinel waits on, which then kills the group). Waits on
    each one's pidfd, which becomes readable when the process exits."""
    deadline = time.monotonic() + timeout_s
    for pid in _children():
        try:
            fd = os.pidfd_open(pid)
        except ProcessLookupError:  # gone already
            continue
        try:
            select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
        finally:
            os.close(fd)
    return _children()
