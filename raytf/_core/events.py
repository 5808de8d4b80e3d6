"""Events: the one channel from tasks to the driver (metrics, progress, checkpoint commits). Here the kinds, the
Event that carries one (with its kind's payload record, _core/payloads.py), and the bus' buffer with its save-now
protocol."""

from __future__ import annotations

import dataclasses
import enum
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

# The kinds' payload records, defined in _core/payloads.py and read through this module too (ev.Row, ev.Committed).
from raytf._core.payloads import Beat, Busy, Committed, Dropped, Notice, Output, Payload, Row, ServiceUsed, Started

# Event kinds, each with its payload's record (PAYLOADS, below).
STARTED = "started"  # the strategy is built, or a Model.fit began (Started)
STEP = "step"  # every metrics.every_steps steps (Row; doubles as a heartbeat)
EPOCH = "epoch"  # an epoch finished (Row)
HEARTBEAT = "heartbeat"  # progress without metrics, at most every failure.heartbeat_s (Beat)
EVAL = "eval"  # the evaluator scored a checkpoint (Row)
CHECKPOINT = "checkpoint"  # a checkpoint was committed (Committed)
OUTPUT = "output"  # a task's output lines the driver shows (tee.TaskOutput) (Output)
PREEMPTED = "preempted"  # the task's process got SIGTERM: a preemption notice (Notice)
# The task is busy with something its peers wait for (an upload slot, the model export): neither it nor the
# ranks blocked on it are hung until allow_s passes; allow_s 0 (or its next step) ends it (Busy).
BUSY = "busy"
# The bus' own, in a drain: what it could not keep of a rank's events since the attempt began (the rank sent faster
# than the driver drained) (Dropped).
DROPPED = "dropped"
# A task read a pipeline through the run's tf.data service (ctx.data_service / raytf.data_service) (ServiceUsed).
DATA_SERVICE = "data_service"

PAYLOADS: dict[str, type[Payload]] = {STARTED: Started, STEP: Row, EPOCH: Row, EVAL: Row, HEARTBEAT: Beat,
                                      CHECKPOINT: Committed, OUTPUT: Output, PREEMPTED: Notice, BUSY: Busy,
                                      DROPPED: Dropped, DATA_SERVICE: ServiceUsed}

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
    """What a task tells the driver: its `kind`, who (`role`, `rank`) in which attempt, the kind's `payload` record
    (a dict given is made the record: a script's JSON rows, a test's), when."""

    kind: str
    role: str
    rank: int
    attempt: int
    payload: Payload | Mapping[str, Any] = field(default_factory=dict)
    time: float = field(default_factory=time.time)

    def __post_init__(self) -> None:
        record = PAYLOADS.get(self.kind)
        if record is not None and not isinstance(self.payload, record):
            self.payload = record.of(self.payload)


def payload_bytes(obj: Any, depth: int = 0) -> int:
    """About what a payload takes (strings by length, everything else a word): the bus' measure of a rank's share."""
    if isinstance(obj, (str, bytes)):
        return 8 + len(obj)
    if depth > 8:
        return 8
    if isinstance(obj, Mapping):
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
        self._dropped: dict[int, Dropped] = {}  # rank -> what was not kept, since the start
        self._told: dict[int, Dropped] = {}  # rank -> the counts its last DROPPED event carried
        self._who: dict[int, tuple[str, int]] = {}  # rank -> (role, attempt), for its DROPPED events
        self._cond = threading.Condition()
        self._stop = threading.Event()
        self._awake = False  # the driver's last drains: none waits for an event any more (`wake_drains`)
        # The save-now protocol (see request_save): one request at a time, numbered.
        self._control = SaveRequest()
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
        dropped = self._dropped.get(e.rank, Dropped())
        if e.kind == OUTPUT:
            dropped = dataclasses.replace(dropped, output_lines=dropped.output_lines + len(e.payload.lines))
        elif held.latest is not None:  # a step row past the bound: the rank's latest, in the place of the last
            self._events[held.latest] = e
            dropped = dataclasses.replace(dropped, steps=dropped.steps + 1)
        else:
            held.latest = len(self._events)
            self._events.append(e)
        self._dropped[e.rank] = dropped

    def wake_drains(self) -> None:
        """The attempt is over (the driver takes the events still on the bus, RayPort.rest): a drain waiting for its
        first event returns now with what there is, and no later drain waits. Its wait, the driver's poll interval
        (0.5 s) for events that no longer come, held every attempt's end (raytf issue 53). Sticky: it may run before
        the drain it is meant for does (a threaded actor's calls keep no order)."""
        with self._cond:
            self._awake = True
            self._cond.notify_all()

    def drain(self, timeout: float) -> list[Event]:
        """Everything buffered, and a DROPPED event for each rank that lost events since the last one; waits up
        to `timeout` seconds for the first event when empty (unless woken: `wake_drains`)."""
        with self._cond:
            if not self._events and timeout > 0 and not self._awake:
                self._cond.wait(timeout)
            out, self._events, self._held = self._events, [], {}
            for rank, counts in self._dropped.items():
                if counts != self._told.get(rank) and counts != Dropped():
                    self._told[rank] = counts
                    role, attempt = self._who[rank]
                    out.append(Event(DROPPED, role, rank, attempt, counts))
            return out

    # -- save-now protocol ----------------------------------------------------------------------
    # Under MWMS every task must save at the same step (the save is collective), and tasks only learn of a
    # request between steps. So: the driver asks to pause; each task's listener thread reports the task's
    # step and the task blocks at its next step end; the driver decides save_at = max(reported) + 1, which
    # no task can have passed (synchronous collectives keep tasks within one step of each other); every task
    # then trains on to save_at, saves, and stops if asked to.

    def request_save(self) -> int:
        with self._cond:
            self._control = SaveRequest(self._control.version + 1, SavePhase.PAUSE)
            self._reports = {}
            self._cond.notify_all()
            return self._control.version

    def report_step(self, version: int, rank: int, step: int) -> None:
        with self._cond:
            if version == self._control.version:
                self._reports[rank] = step
                self._cond.notify_all()

    def wait_reports(self, count: int, timeout: float) -> dict[int, int]:
        with self._cond:
            self._cond.wait_for(lambda: len(self._reports) >= count, timeout)
            return dict(self._reports)

    def decide(self, save_at: int, stop: bool) -> None:
        with self._cond:
            self._control = dataclasses.replace(self._control, phase=SavePhase.DECIDED, save_at=save_at, stop=stop)
            self._cond.notify_all()

    def wait_control(self, known: tuple[int, SavePhase | None], timeout: float) -> SaveRequest:
        """The save-now request once it differs from `known` (version, phase), or as it is after `timeout`."""
        with self._cond:
            self._cond.wait_for(lambda: (self._control.version, self._control.phase) != tuple(known), timeout)
            return self._control


class SavePhase(str, enum.Enum):
    PAUSE = "pause"  # every task reports its step and blocks at its next step end
    DECIDED = "decided"  # every task trains on to save_at, saves, and stops if asked


@dataclass(frozen=True)
class SaveRequest:
    """The save-now protocol's state, as the bus keeps it and each task's listener reads it (_task/control.py):
    request `version` (0: none yet), its phase, and once decided the agreed step and whether to stop after it."""

    version: int = 0
    phase: SavePhase | None = None
    save_at: int | None = None
    stop: bool = False
