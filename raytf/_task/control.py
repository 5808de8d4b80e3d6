"""A task's follower of the driver's save-now requests (see events.EventBuffer for the protocol)."""

from __future__ import annotations

import logging
import threading

log = logging.getLogger(__name__)


class ControlListener(threading.Thread):
    """Follows the driver's save-now requests (events.EventBuffer) so step_end only reads attributes."""

    def __init__(self, bus, rank: int, ctx) -> None:
        super().__init__(name="raytf-control", daemon=True)
        self.bus, self.rank, self.ctx = bus, rank, ctx
        self.pending = False  # a pause was requested: block at the next step end until decided
        self.decided = threading.Event()
        self.save_at: int | None = None
        self.stop_after = False
        self._closed = threading.Event()

    def run(self) -> None:
        import ray

        known: tuple[int, str | None] = (0, None)
        while not self._closed.is_set():
            try:
                c = ray.get(self.bus.wait_control.remote(known, 5.0))
            except Exception as e:  # the bus is gone with its driver: nothing more to follow
                log.debug("control listener: %s", e)
                return
            if (c["version"], c["phase"]) == known:
                continue
            known = (c["version"], c["phase"])
            if c["phase"] == "pause":
                self.decided.clear()
                self.pending = True
                self.bus.report_step.remote(c["version"], self.rank, self.ctx.step)
            elif c["phase"] == "decided":
                self.save_at, self.stop_after = c["save_at"], c["stop"]
                self.decided.set()

    def close(self) -> None:
        self._closed.set()
