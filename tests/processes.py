"""Processes a script-mode task leaves behind, found by their command lines (Linux /proc)."""

import os
import select
import time
from pathlib import Path

from tests.conftest import SESSION_ENV

MARKS = (b"raytf._task.script.child", b"raytf-test-helper")


def _children() -> list[int]:
    """Script-mode child processes (and the helpers test scripts start) of this test run still alive (Linux
    /proc): those whose environment carries this run's RAYTF_TEST_SESSION (tests/conftest.py), so another test
    run on the machine is not counted."""
    mine = f"{SESSION_ENV}={os.environ[SESSION_ENV]}".encode()
    pids = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            if any(mark in (proc / "cmdline").read_bytes() for mark in MARKS) and \
                    mine in (proc / "environ").read_bytes().split(b"\0"):
                pids.append(int(proc.name))
        except OSError:  # exited while we looked
            continue
    return pids


def leftover_script_processes(timeout_s: float = 15.0) -> list[int]:
    """_children() once they have had `timeout_s` to go: a torn-down task's processes die asynchronously
    (the actor's exit closes the pipe its script's sentinel waits on, which then kills the group). Waits on
    each one's pidfd, which becomes readable when the process exits."""
    wait_exit(_children(), timeout_s)
    return _children()


def wait_exit(pids: list[int], timeout_s: float) -> list[int]:
    """Those of `pids` still running after at most `timeout_s`: waits on each one's pidfd, which becomes readable
    when the process exits."""
    deadline = time.monotonic() + timeout_s
    for pid in pids:
        try:
            fd = os.pidfd_open(pid)
        except ProcessLookupError:  # gone already
            continue
        try:
            select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
        finally:
            os.close(fd)
    return [p for p in pids if os.path.exists(f"/proc/{p}")]


def naming(text: str, timeout_s: float = 15.0) -> list[int]:
    """The processes whose command line holds `text` (a Ray temp directory: the Ray processes a launch started
    there), once they have had `timeout_s` to go."""

    def find() -> list[int]:
        pids = []
        for proc in Path("/proc").glob("[0-9]*"):
            try:
                if text.encode() in (proc / "cmdline").read_bytes():
                    pids.append(int(proc.name))
            except OSError:  # exited while we looked
                continue
        return pids

    wait_exit(find(), timeout_s)
    return find()
