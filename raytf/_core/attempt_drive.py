"""The attempt loop driven over a task group: `drive` feeds `AttemptLoop` (_core/attempt_loop.py) what the group
reports (events, finished tasks, the clock, Ctrl-C) and carries out the actions it returns (ask for a save, decide
the step, release the servers); `Port` is what it needs of a group (the Ray one: _driver/ray_port.py; a fake in
tests/core). Pure: no Ray, no TensorFlow."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Protocol

from raytf._core import events as ev
from raytf._core.attempt_loop import AttemptLoop, Phase
from raytf._core.attempt_messages import Action, AskSave, Decide, Finished, Release
from raytf._core.attempt_record import Drain


class Port(Protocol):
    """What the loop needs of a task group."""

    def poll(self, timeout_s: float) -> tuple[list[ev.Event], list[Finished]]:
        """Events drained from the bus and tasks whose call returned, waiting up to `timeout_s` for either."""

    def ask_save(self, count: int, timeout_s: float) -> dict[int, int]:
        """Ask for a save-now; the steps reported within `timeout_s` (rank -> step)."""

    def decide(self, save_at: int) -> None: ...

    def release(self) -> None: ...

    def rest(self) -> list[ev.Event]:
        """The events still on the bus once the loop has ended."""


def drive(loop: AttemptLoop, port: Port, on_events: Callable[[list[ev.Event]], None], *, poll_s: float = 0.5,
          clock: Callable[[], float] = time.time, on_poll: Callable[[], None] | None = None,
          grow: Callable[[float], bool | None] | None = None,
          drained: Callable[[float], Drain | None] | None = None) -> AttemptLoop:
    """Run `loop` to a terminal phase over `port`. `on_events` gets every event drained (the driver's sinks);
    `on_poll` runs once per round (the metrics flush); `grow(now)` too while training (elastic: None to keep the
    size, True to grow saving at an agreed step, False to grow at the next checkpoint), and `drained(now)` (a node
    of the group that Ray drains, or None). A KeyboardInterrupt is an input, not an exit: the loop decides (a
    save-and-stop, or at once)."""
    while not loop.done:
        try:
            events, finished = port.poll(poll_s)
            on_events(events)
            actions = loop.on_events(events, clock())
            for f in finished:
                actions += loop.on_finished(f, clock())
            actions += loop.on_tick(clock())
            # (Asked until one is acted on: a script's group trains on until its next commit after it.)
            if drained is not None and loop.phase is Phase.TRAINING and loop.drain is None \
                    and (drain := drained(clock())) is not None:
                actions += loop.on_drain(drain, clock())
            if grow is not None and loop.phase is Phase.TRAINING and (save_now := grow(clock())) is not None:
                actions += loop.on_grow(clock(), save_now)
            _carry_out(loop, port, actions, clock)
            if on_poll is not None:
                on_poll()
        except KeyboardInterrupt:
            pending = loop.on_interrupt(clock())
            while pending:  # the final save's calls; a second Ctrl-C during them ends at once
                try:
                    _carry_out(loop, port, pending, clock)
                    pending = []
                except KeyboardInterrupt:
                    pending = loop.on_interrupt(clock())
    return loop


def _carry_out(loop: AttemptLoop, port: Port, actions: list[Action], clock: Callable[[], float]) -> None:
    while actions:
        a = actions.pop(0)
        if isinstance(a, AskSave):
            actions += loop.on_reports(port.ask_save(a.count, a.timeout_s), clock())
        elif isinstance(a, Decide):
            port.decide(a.save_at)
        elif isinstance(a, Release):
            port.release()
