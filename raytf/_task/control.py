"""A task's follower of the driver's save-now requests (see events.EventBuffer for the protocol). Two threads share
them: the listener records each request and its decision; the training thread, between steps, waits for the
decision, trains on to the agreed step, saves, and marks that request handled. Requests are numbered and kept
under a lock: the training thread marks the one it handled, never "none pending", so a request that arrives while
it finishes the one before stays pending (raytf issue 33)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from raytf._core.events import SavePhase

log = logging.getLogger(__name__)


class TrainingStopped(BaseException):
    """Raised out of step_end after a requested save when the driver asked to stop (Ctrl-C with
    checkpoint.on_interrupt, or a preemption notice). A BaseException so `except Exception` in user code
    does not swallow it."""


@dataclass(frozen=True)
class SaveDecision:
    """Request `version`: every task saves at step `save_at`, then stops if `stop`."""

    version: int
    save_at: int
    stop: bool


class ControlListener(threading.Thread):
    """Follows the driver's save-now requests (events.EventBuffer) so step_end only asks `pending`."""

    def __init__(self, bus, rank: int, ctx) -> None:
        super().__init__(name="raytf-control", daemon=True)
        self.bus, self.rank, self.ctx = bus, rank, ctx
        self._cond = threading.Condition()
        self._requested = 0  # the newest request's version
        self._handled = 0  # the newest the training thread is done with
        self._decision: SaveDecision | None = None  # the newest request's, once decided
        self._closed = threading.Event()

    @property
    def pending(self) -> bool:
        """A pause was requested and not handled yet: block at the next step end until decided."""
        with self._cond:
            return self._requested > self._handled

    def wait_decision(self, timeout: float) -> tuple[int, SaveDecision | None]:
        """The newest request's version and its decision, waiting up to `timeout` for it (None: not in time)."""
        with self._cond:
            self._cond.wait_for(lambda: self._decision is not None and self._decision.version == self._requested,
                                timeout)
            decision = self._decision if self._decision and self._decision.version == self._requested else None
            return self._requested, decision

    def handled(self, version: int) -> None:
        """The training thread is done with request `version` (and those before it)."""
        with self._cond:
            self._handled = max(self._handled, version)

    def follow(self, ctx, save: Callable[[], Any] | None) -> None:
        """The training thread, at a step end with a request pending: wait for its decision, train on to the agreed
        step, then `save` (every task at the same step: the save is collective) and stop if asked."""
        version, decision = self.wait_decision(timeout=120)
        if decision is None:
            log.warning("save request: no decision from the driver in 120 s; training on")
            self.handled(version)
            return
        if ctx.step < decision.save_at:
            return  # train on to the agreed step
        self.handled(decision.version)
        # Every task counts steps alike (steps_per_execution included), so all pass save_at together.
        if save is not None:
            save()
        if decision.stop:
            raise TrainingStopped(f"stopped by the driver after step {ctx.step}")

    def run(self) -> None:
        import ray

        known: tuple[int, SavePhase | None] = (0, None)
        while not self._closed.is_set():
            try:
                c = ray.get(self.bus.wait_control.remote(known, 5.0))
            except Exception as e:  # the bus is gone with its driver: nothing more to follow
                log.debug("control listener: %s", e)
                return
            if (c.version, c.phase) == known:
                continue
            known = (c.version, c.phase)
            if c.phase is SavePhase.PAUSE:
                with self._cond:
                    self._requested, self._decision = max(self._requested, c.version), None
                    self._cond.notify_all()
                self.bus.report_step.remote(c.version, self.rank, self.ctx.step)
            elif c.phase is SavePhase.DECIDED:
                with self._cond:
                    if c.version == self._requested:
                        self._decision = SaveDecision(c.version, c.save_at, c.stop)
                        self._cond.notify_all()

    def close(self) -> None:
        self._closed.set()
