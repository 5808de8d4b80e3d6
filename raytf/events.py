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
