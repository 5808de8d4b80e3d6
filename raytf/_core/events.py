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
OUTPUT = "output"  # a task's output lines the driver shows (tee.TaskOutput); payload: lines [[out|err, text], ...]
PREEMPTED = "preempted"  # the task's process got SIGTERM (preemption notice); payload: step
# The task is busy with something its peers wait for (an upload slot, the model export): neither it nor the
# ranks blocked on it are hung until allow_s passes; allow_s 0 (or its next step) ends it. payload: what, allow_s
BUSY = "busy"
# The bus' own, in a drain: what it could not keep of a rank's events since the attempt began (the rank sent faster
# than the driver drained); payload: steps (step rows, not in metrics.parquet), output_lines (not streamed).
DROPPED = "dropped"
# A task read a pipeline through the run's tf.data service (ctx.data_service / raytf.data_service); payload: job.
DATA_SERVICE = "data_service"

# What the bus may merge or drop when a rank sends more than its bound: heartbeats (the latest says it all), step
# rows (past the bound only the latest is kept, for progress and the hang watch; the others are counted) and
# streamed output (counted; the task's log has it). Every other kind (started, epoch, eval, checkpoint, preempted,
# busy) is a fact the driver acts on or records: never dropped.
COALESCED = frozenset({STEP, HEARTBEAT, OUTPUT})
# What the bus holds of one rank between two drains (every 0.5 s) before it merges and drops: far above what a
# run reports (a row every metrics.every_steps steps, output in pushes of at most 256 KiB every 0.2 s), so only
# a program that floods it, or a driver stalled for seconds, reaches it.
MAX_EVENTS_PER_RANK = 2000
# The bus actor's concurrency group that runs the tasks' pushes (_driver/group.py).
PUSH_GROUP = "push"
MAX_BYTES_PER_RANK = 4 * 1024 * 1024


@dataclass
class Event:
    kind: str
    role: str
    rank: int
    attempt: int
    payload: dict[str, Any] = field(default_factory=dict)
    time: float = field(default_factory=time.time)


def payload_bytes(obj: Any, depth: int = 0) -> int:
    """About what a payload takes (strings by length, everything else a word): the bus' measure of a rank's share."""
    if isinstance(obj, (str, bytes)):
        return 8 + len(obj)
    if depth > 8:
        return 8
    if isinstance(obj, dict):
        return 16 + sum(payload_bytes(k, depth + 1) + payload_bytes(v, depth + 1) for k, v in obj.items())
    if isinstance(obj, (list, tuple)):
        return 16 + sum(payload_bytes(v, depth + 1) for v in obj)
    return 8


@dataclass
class _Held:
    """One rank's share of the buffer since the last drain."""

    events: int = 0
    bytes: int = 0
    beat: int | None = None  # where its heartbeat is in the buffer (one at most: a later one takes its place)
    latest: int | None = None  # where its step row past the bound is (one at most: a later one takes its place)


class EventBuffer:
    """Thread-safe buffer the driver drains with a deadline; runs inside the event-bus actor.

    Bounded per rank (`max_events`, `max_bytes` of payload): see COALESCED for what gives way. What was dropped
    is reported in the next drain as one DROPPED event per rank. Kept free of Ray so the driver loop can be
    tested with a scripted stream.
    """

    def __init__(self, max_events: int = MAX_EVENTS_PER_RANK, max_bytes: int = MAX_BYTES_PER_RANK) -> None:
        self.max_events, self.max_bytes = max_events, max_bytes
        self._events: list[Event] = []
        self._held: dict[int, _Held] = {}
        self._dropped: dict[int, dict[str, int]] = {}  # rank -> what was not kept, since the start
        self._told: dict[int, dict[str, int]] = {}  # rank -> the counts its last DROPPED event carried
        self._who: dict[int, tuple[str, int]] = {}  # rank -> (role, attempt), for its DROPPED events
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
            for e in events:
                self._add(e)
            self._cond.notify_all()

    def _add(self, e: Event) -> None:
        held = self._held.setdefault(e.rank, _Held())
        self._who[e.rank] = (e.role, e.attempt)
        if e.kind == HEARTBEAT:
            if held.beat is not None:  # the latest beat says all that the earlier ones did
                self._events[held.beat] = e
            else:
                held.beat = len(self._events)
                self._events.append(e)
            return
        size = payload_bytes(e.payload)
        if e.kind not in COALESCED or (held.events < self.max_events and held.bytes + size <= self.max_bytes):
            held.events += 1
            held.bytes += size
            self._events.append(e)
            return
        dropped = self._dropped.setdefault(e.rank, {"steps": 0, "output_lines": 0})
        if e.kind == OUTPUT:
            dropped["output_lines"] += len(e.payload.get("lines", ()))
        elif held.latest is not None:  # a step row past the bound: the rank's latest, in the place of the last
            self._events[held.latest] = e
            dropped["steps"] += 1
        else:
            held.latest = len(self._events)
            self._events.append(e)

    def drain(self, timeout: float) -> list[Event]:
        """Everything buffered, and a DROPPED event for each rank that lost events since the last one; waits up
        to `timeout` seconds for the first event when empty."""
        with self._cond:
            if not self._events and timeout > 0:
                self._cond.wait(timeout)
            out, self._events, self._held = self._events, [], {}
            for rank, counts in self._dropped.items():
                if counts != self._told.get(rank):
                    self._told[rank] = dict(counts)
                    role, attempt = self._who[rank]
                    out.append(Event(DROPPED, role, rank, attempt, dict(counts)))
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
