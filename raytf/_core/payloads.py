"""The events' payloads (_core/events.py): one small frozen record per kind of event, defined once (Started, Row,
Beat, Committed, Output, Notice, Busy, Dropped, ServiceUsed), each a `Payload`: fields raytf reads by name, and a
read-only mapping for the hooks written for earlier versions' dicts. Which kind carries which record is
events.PAYLOADS; the records travel inside the events Ray pickles between processes. Pure: no Ray, no TensorFlow."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any


class Payload(Mapping[str, Any]):
    """An event's payload: a frozen record whose fields raytf reads by name. It is also a read-only mapping of its
    fields that are set (not None), equal to a dict of them, so an `on_event` hook written for the dicts of
    earlier versions (`e.payload["step"]`, `e.payload.get("metrics")`) reads it unchanged. (Each record is a
    dataclass with eq=False: the mapping's equality stands.)"""

    def __getitem__(self, key: str) -> Any:
        value = getattr(self, key, None) if key in _field_names(type(self)) else None
        if value is None:
            raise KeyError(key)
        return value

    def __iter__(self) -> Iterator[str]:
        return (name for name in _field_names(type(self)) if getattr(self, name) is not None)

    def __len__(self) -> int:
        return sum(1 for _ in self)

    @classmethod
    def of(cls, values: Mapping[str, Any]) -> Payload:
        """The record of a dict payload (a script's rows come as JSON; tests and hooks make them): a key the record
        does not have is a TypeError (a payload nobody would read)."""
        return cls(**dict(values))


@functools.cache  # (a payload's size is checked for every event sent, in the task and on the bus)
def _field_names(cls: type) -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(cls))


@dataclass(frozen=True, eq=False)
class Started(Payload):
    """STARTED: the task's strategy is built (its replicas in sync, versions, when it passed the start's phases:
    _core/timeline.py's TASK_MARKS), or a Keras Model.fit began (its epochs and steps, its number, where it counts
    on from: a later fit's rows are not the earlier ones')."""

    replicas: int = 0
    tensorflow: str | None = None
    keras: str | None = None
    timeline: dict[str, float] | None = None
    epochs: int | None = None
    steps_per_epoch: int | None = None
    fit: int | None = None
    base_epoch: int | None = None
    base_step: int | None = None


@dataclass(frozen=True, eq=False)
class Row(Payload):
    """STEP, EPOCH, EVAL: a metrics row at (epoch, step); a step row's epoch is the one under way (1-based), an
    epoch row's the one completed. `fit`: the Keras Model.fit it belongs to (None outside fit)."""

    epoch: int = 0
    step: int = 0
    metrics: dict[str, Any] = field(default_factory=dict)
    fit: int | None = None


@dataclass(frozen=True, eq=False)
class Beat(Payload):
    """HEARTBEAT: progress without metrics (the epoch under way, the step)."""

    epoch: int = 0
    step: int = 0


@dataclass(frozen=True, eq=False)
class Committed(Payload):
    """CHECKPOINT: the checkpoint of (epoch, step), the run's `seq`-th, committed at `uri`."""

    epoch: int = 0
    step: int = 0
    seq: int = 0
    uri: str = ""


@dataclass(frozen=True, eq=False)
class Output(Payload):
    """OUTPUT: lines the driver shows, each [stream, text] (stream "out" or "err")."""

    lines: list[list[str]] = field(default_factory=list)


@dataclass(frozen=True, eq=False)
class Notice(Payload):
    """PREEMPTED: the task got SIGTERM at `step`."""

    step: int | None = None


@dataclass(frozen=True, eq=False)
class Busy(Payload):
    """BUSY: what the task is busy with, allowed `allow_s` seconds (0: no longer busy)."""

    what: str = ""
    allow_s: float = 0.0


@dataclass(frozen=True, eq=False)
class Dropped(Payload):
    """DROPPED: a rank's step rows (not in metrics.parquet) and output lines (not streamed) the bus could not keep
    since its attempt began."""

    steps: int = 0
    output_lines: int = 0


@dataclass(frozen=True, eq=False)
class ServiceUsed(Payload):
    """DATA_SERVICE: the task reads a pipeline through the run's tf.data service, under this job name."""

    job: str = ""
