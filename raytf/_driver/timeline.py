"""The launch's timeline (_core.timeline) on the driver's side: its zero, this process's start time (the CLI marks its
own phases in it before the launch exists: its imports, the config checked, Ray started). No Ray here: the CLI
imports it before Ray."""

from __future__ import annotations

import os
import time

from raytf._core.timeline import Timeline, process_start

_IMPORTED_AT = time.time()  # where /proc is not (macOS): the earliest time this process is known to have run


def process_started_at() -> float:
    """This process's start (wall clock), from /proc; without /proc, when this module was imported."""
    try:
        with open(f"/proc/{os.getpid()}/stat") as f:
            stat = f.read()
        boot = time.time() - time.clock_gettime(time.CLOCK_BOOTTIME)  # (the clock of /proc's start times)
        return process_start(stat, boot, os.sysconf("SC_CLK_TCK"))
    except (OSError, AttributeError, ValueError, IndexError):  # (AttributeError: no CLOCK_BOOTTIME, not Linux)
        return _IMPORTED_AT


def for_process() -> Timeline:
    """A launch's timeline, its zero this process's start: the CLI makes one as its main() begins and marks its own
    phases in it before the launch exists (`preflight.prepare(..., timeline=)`); raytf.fit gets a new one."""
    return Timeline(process_started_at())
