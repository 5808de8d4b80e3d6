"""The launch's timeline (_core.timeline) on the driver's side: this process's start time, and the marks the CLI
takes before a driver exists (its imports, the config checked, Ray started), handed to the launch's driver.
No Ray here: the CLI imports it before Ray."""

from __future__ import annotations

import os
import time

from raytf._core.timeline import Timeline, process_start

_IMPORTED_AT = time.time()  # where /proc is not (macOS): the earliest time this process is known to have run
_pending: dict[str, float] = {}  # the CLI's marks, until the launch's driver takes them


def process_started_at() -> float:
    """This process's start (wall clock), from /proc; without /proc, when this module was imported."""
    try:
        with open(f"/proc/{os.getpid()}/stat") as f:
            stat = f.read()
        boot = time.time() - time.clock_gettime(time.CLOCK_BOOTTIME)  # (the clock of /proc's start times)
        return process_start(stat, boot, os.sysconf("SC_CLK_TCK"))
    except (OSError, AttributeError, ValueError, IndexError):  # (AttributeError: no CLOCK_BOOTTIME, not Linux)
        return _IMPORTED_AT


def mark(phase: str) -> None:
    """A boundary the CLI passes before the launch's driver exists (the first time counts)."""
    _pending.setdefault(phase, time.time())


def for_launch() -> Timeline:
    """A new launch's timeline, with the marks the CLI took for it (only the first launch of a process gets them:
    --scaling's later runs did not start Python or Ray)."""
    t = Timeline(process_started_at())
    for phase, at in _pending.items():
        t.mark(phase, at)
    _pending.clear()
    return t
