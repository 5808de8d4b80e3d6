"""Events: the one channel from tasks to the driver (metrics, progress, checkpoint commits)."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

# Event kinds.
STARTED = "started"  # the strategy is built; payload: replicas, keras, devices
STEP = "step"  # every metrics.every_steps steps; payload: epoch, step, metrics (doubles as a heartbeat)
EPOCH = "epoch"  # an epoch finished; payload: epoch, step, metrics
HEARTBEAT = "heartbeat"  # progress without metrics, at most every failure.heartbeat_s; payload: epoch, step
EVAL = "eval"  # the evaluator scored a checkpoint; payload: epoch, step, metrics
CHECKPOINT = "checkpoint"  # a checkpoint was committed; payload: epoch, step, uri
OUTPUT = "output"  # script mode: a streamed rank's stdout/stderr; payload: lines [[out|err, text], ...]
PREEMPTED = "preempted"  # the task's process got SIGTERM (preemption notice); payload: step
# The task is busy with something its peers wait for (an upload slot, the model export): neither it nor the
# ranks blocked on it are hung until allow_s passes; allow_s 0 (or its next step) ends it. payload: what, allow_s
BUSY = "busy"


@dataclass
class Event:
    kind: str
    role: str
    rank: int
    attempt: int
    payload: dict[str, Any] = field(default_factory=dict)
    time: float = field(default_factory=time.time)


class EventBuffer:
    """Thread-safe buffer the driver drains with a deadline; runs inside the event-bus actor.

    Kept free of Ray so the driver loop can be tested with a scripted stream.
    """

    def __init__(self) -> None:
        self._events: list[Event] = []
        self._cond = threading.Condition()
        self._stop = threading.Event()
        # The save-now protocol (see request_save): one request at a time, numbered.
        self._control = {"version": 0, "phase": None, "save_at": None, "stop": False}
        self._reports: dict[int, int] = {}

    def request_stop(self) -> None:
        """Training is over: parameter servers, workers and the evaluator may finish."""
        self._stop.set()

    def wait_stop(self, timeout: float | None) -> bool:
        """Block until stop is requested (True) or `timeout` seconds pass (False)."""
        return self._stop.wait(timeout)

    def push(self, events: list[Event]) -> None:
        with self._cond:
            self._events.extend(events)
            self._cond.notify_all()

    def drain(self, timeout: float) -> list[Event]:
        """Everything buffered; waits up to `timeout` seconds for the first event when empty."""
        with self._cond:
            if not self._events and timeout > 0:
                self._cond.wait(timeout)
            out, self._events = self._events, []
            return out

    # -- save-now protocol ----------------------------------------------------------------------
    # Under MWMS every task must save at the same step (the save is collective), and tasks only learn of a
    # request between steps. So: the driver asks to pause; each task's listener thread reports the task's
    # step and the task blocks at its next step end; the driver decides save_at = max(reported) + 1, which
    # no task can have passed (synchronous collectives keep tasks within one step of each other); every task
    # then trains on to save_at, saves, and stops if asked to.

    def request_save(self) -> int:
        with self._cond:
            self._control = {"version": self._control["version"] + 1, "phase": "pause", "save_at": None,
                             "stop": False}
            self._reports = {}
            self._cond.notify_all()
            return self._control["version"]

    def report_step(self, version: int, rank: int, step: int) -> None:
        with self._cond:
            if version == self._control["version"]:
                self._reports[rank] = step
                self._cond.notify_all()

    def wait_reports(self, count: int, timeout: float) -> dict[int, int]:
        with self._cond:
            self._cond.wait_for(lambda: len(self._reports) >= count, timeout)
            return dict(self._reports)

    def decide(self, save_at: int, stop: bool) -> None:
        with self._cond:
            self._control = {**self._control, "phase": "decided", "save_at": save_at, "stop": stop}
            self._cond.notify_all()

    def wait_control(self, known: tuple[int, str | None], timeout: float) -> dict:
        """The control state once it differs from `known` (version, phase), or as it is after `timeout`."""
        with self._cond:
            self._cond.wait_for(lambda: (self._control["version"], self._control["phase"]) != tuple(known),
                                timeout)
            return dict(self._control)
