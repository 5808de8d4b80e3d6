"""One task's progress count, pure: completed epochs and global steps, when a metrics row is due, and the rows
and heartbeats that tell the driver. Shared by the training function's TrainContext (events on the bus) and a
script's reporter (JSON lines on a pipe), which differ only in where they send."""

from __future__ import annotations

import logging
import numbers
import time
from collections.abc import Callable, Mapping
from typing import Any

from raytf._core.checkpoints import crossed
from raytf._core.events import EPOCH, HEARTBEAT, STEP, Beat, Row
from raytf._core.limits import MetricNames


def scalar(value: Any) -> float | None:
    """A metric value as a float (tensors and numpy scalars included), or None if not a real scalar a float can
    hold (a complex number, an int past float's range: raytf issue 71, they failed the training)."""
    try:
        if isinstance(value, numbers.Number):
            return float(value)
        if hasattr(value, "fetch"):  # a ParameterServerStrategy RemoteValue: waits for its closure
            value = value.fetch()
        return float(value.numpy() if hasattr(value, "numpy") else value)
    except (TypeError, ValueError, OverflowError):
        return None


_said: set[str] = set()  # the metric names whose value was dropped, said once per process


def scalars(metrics: Mapping[str, Any] | None) -> dict[str, float]:
    """The metrics that are scalars, as floats. A number that is not one a float holds (complex, a huge int) is
    dropped, never a reason to fail a step, with one warning per name naming it."""
    out = {}
    for k, v in (metrics or {}).items():
        f = scalar(v)
        if f is not None:
            out[str(k)] = f
        elif isinstance(v, numbers.Number) and str(k) not in _said:
            _said.add(str(k))
            logging.getLogger("raytf").warning(
                "metric %r: its %s value %.60r is no real number a float can hold: dropped (report a float)",
                str(k), type(v).__name__, v)
    return out


class Cadence:
    """When step metrics are due (the first step of a process always is: launch-to-first-step), and the
    steps/s since the last reported row; with a `split` (breakdown.Split), where those steps' time went.

    The first row of a process carries no breakdown (its interval holds building the model and tracing the step),
    nor does its time count for the next; `restart` (at an epoch's end) starts the next interval afresh, so a
    row's steps are training steps only (not the validation or callbacks between epochs)."""

    def __init__(self, every_steps: int, step: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.every = every_steps
        self._now = clock
        self._clock = (clock(), step)
        self._stepped = False
        self.split = None  # breakdown.Split, set by the task when it can measure

    def restart(self, step: int) -> None:
        self._clock = (self._now(), step)
        if self.split is not None:
            self.split.mark()

    def row(self, metrics: Mapping[str, Any] | None, before: int, after: int) -> dict[str, float] | None:
        first, self._stepped = not self._stepped, True
        if not (first or crossed(before, after, self.every)):
            return None
        now = self._now()
        t0, s0 = self._clock
        row = scalars(metrics)
        if now > t0:
            row["steps_per_s"] = (after - s0) / (now - t0)
        if self.split is not None:
            if first:
                self.split.mark()
            else:
                row.update(self.split.row(now - t0, after - s0))
        self._clock = (now, after)
        return row


class StepCounter:
    """A task's completed epochs (`epoch`) and global steps (`step`), and what it sends about them through
    `send(kind, payload)`: a metrics row every `every_steps` steps, else a heartbeat at most every
    `heartbeat_s`. Step rows and heartbeats carry the epoch under way (1-based); epoch rows, the epochs
    completed. `clock` (seconds, monotonic) is for tests."""

    def __init__(self, send: Callable[[str, dict[str, Any]], None], *, every_steps: int, heartbeat_s: float,
                 epoch: int = 0, step: int = 0, clock: Callable[[], float] = time.monotonic,
                 max_names: int | None = None) -> None:
        self._emit = send
        # metrics.max_names: checked here, before a row leaves the task (the driver never holds the excess).
        self._names = MetricNames(max_names) if max_names else None
        self._heartbeat_s = heartbeat_s
        self._now = clock
        self.epoch = epoch  # completed epochs
        self.step = step  # completed global steps
        self.fit: int | None = None  # the program's Model.fit call under way (1, 2, ...): None outside Keras fit
        self._cadence = Cadence(every_steps, step, clock)
        self._last_beat = clock()
        # Called for every step row, each adding its figures ({column: value}) to it: the step-time breakdown, GPU
        # samples. A source that has nothing to say returns {}.
        self.sources: list[Callable[[], dict[str, float]]] = []

    def _sourced(self, row: dict[str, float]) -> dict[str, float]:
        for source in self.sources:
            row.update(source())
        return row

    def report(self, metrics: Mapping[str, Any] | None, *, kind: str = STEP) -> None:
        """Send a metrics row (this task's rank, current epoch and step) to the driver."""
        self._last_beat = self._now()
        row = Row(epoch=self.epoch + (1 if kind == STEP else 0), step=self.step, metrics=scalars(metrics),
                  fit=self.fit)
        if self._names is not None:
            self._names.check(row.metrics)
        self._emit(kind, row)

    def heartbeat(self) -> None:
        """Tell the driver this task is making progress (at most every failure.heartbeat_s). Called for you
        by step_end and the Keras callback; call it from long phases of your own (evaluation, data loading)."""
        now = self._now()
        if now - self._last_beat >= self._heartbeat_s:
            self._last_beat = now
            self._emit(HEARTBEAT, Beat(epoch=self.epoch + 1, step=self.step))

    def step_end(self, metrics: Mapping[str, Any] | None = None, *, steps: int = 1) -> None:
        """Count `steps` more steps; report the metrics if a row is due (values may be tensors: they are only
        read then), else heartbeat."""
        before, self.step = self.step, self.step + steps
        row = self._cadence.row(metrics, before, self.step)
        if row is None:
            self.heartbeat()
        else:
            self.report(self._sourced(row))

    def epoch_end(self, metrics: Mapping[str, Any] | None = None) -> None:
        """Count an epoch and report its metrics; the next step row's interval starts here."""
        self.epoch += 1
        self.report(metrics or {}, kind=EPOCH)
        self._cadence.restart(self.step)

    @property
    def split(self):
        """The step-time breakdown (breakdown.Split) the step rows carry; None: step rows carry steps/s only."""
        return self._cadence.split

    @split.setter
    def split(self, split) -> None:
        self._cadence.split = split

    def steps_per_s(self, before: int) -> dict[str, float]:
        """{"steps_per_s": ..., and the breakdown's columns} over the steps from `before` to now, when a row would
        be due (for rows the caller counts itself); else {}."""
        return self._cadence.row(None, before, self.step) or {}


def misused_report(args: tuple, names: list[str]) -> str:
    """The TypeError's line for a wrong call of `ctx.report` (e.g. `ctx.report(epoch=1, loss=0.5)`): the method as the
    user called it, its signature, and the call they meant."""
    got = (f"keyword argument(s) {', '.join(names)}" if names else "") + (
        f"{' and ' if names else ''}{len(args)} more positional argument(s)" if args else "")
    shown = ", ".join(f"{n!r}: ..." for n in names if n not in ("epoch", "step")) or "'loss': ..."
    return (f"TrainContext.report(metrics=None, *, kind='step') takes the metrics as one dict, got {got}. Fix: "
            f"ctx.report({{{shown}}}); the epoch and step are the context's own count (ctx.step_end(), "
            "ctx.epoch_end()), and kind='eval' marks an evaluation's row")
