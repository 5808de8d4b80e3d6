"""The Ray side of the attempt loop (_core.attempt_drive.Port): what the tasks' calls and the event bus report, and
the save-now calls. Every call to the bus has a deadline: a bus that stopped answering fails the attempt."""

from __future__ import annotations

import logging

import ray

from raytf._core import events as ev
from raytf._core import failure
from raytf._core.attempt_messages import Finished
from raytf._core.plan import WORKER, TaskSpec, actor_name, is_server
from raytf._driver import nodes
from raytf._driver.group import TaskGroup
from raytf.errors import WorkerError

log = logging.getLogger("raytf")

# A bus call's own deadline on top of what it may wait by design (its `timeout` argument): the bus is a
# threaded actor on the driver's node; not answering within this is a bus that is gone or stuck.
BUS_SLACK_S = 30.0


class BusUnresponsive(RuntimeError):
    """The run's event bus did not answer within its deadline."""


class RayPort:
    def __init__(self, group: TaskGroup, primary: dict, background: dict, *, poll_s: float, service=None) -> None:
        self.group, self.bus, self.poll_s = group, group.bus, poll_s
        self.service = service  # the tf.data service (_driver/dataservice.py): a server it cannot start again is lost
        self.refs: dict = {**primary, **background}  # ref -> TaskSpec, until its call returns
        self._drain = self.bus.drain.remote(poll_s)

    def _get(self, ref, waits_s: float = 0.0):
        try:
            return ray.get(ref, timeout=waits_s + BUS_SLACK_S)
        except ray.exceptions.GetTimeoutError:
            raise BusUnresponsive(f"the run's event bus did not answer within {waits_s + BUS_SLACK_S:g}s") from None

    def poll(self, timeout_s: float) -> tuple[list[ev.Event], list[Finished]]:
        ready, _ = ray.wait([*self.refs, self._drain], num_returns=1, timeout=timeout_s * 4)
        events: list[ev.Event] = []
        finished: list[Finished] = []
        for ref in ready:
            if ref == self._drain:
                events += self._get(ref, self.poll_s)
                self._drain = self.bus.drain.remote(self.poll_s)
                continue
            t = self.refs.pop(ref)
            error = self.group.outcome(ref, t)
            finished.append(Finished(t.rank, error, alone=error is not None and self._lost_alone(t, error)))
        if self.service is not None:  # (its errors' rank: -1, no task's)
            finished += [Finished(e.rank, e) for e in self.service.poll()]
        return events, finished

    def _lost_alone(self, t: TaskSpec, error: WorkerError) -> bool:
        """A ParameterServerStrategy worker whose process died on a host that is still up: TF's coordinator
        moves its functions to the other workers. Lost with its host (cut off, or down), it is not: TF waits
        for the calls in flight to it with no deadline (a dead process refuses the connection, a lost host never
        answers, and TF's gRPC channels have no keepalive), so the chief would wait until failure.hang_timeout_s
        (seen on raytf issue 16's partition test, TF 2.21)."""
        strategy = self.group.cfg.cluster.strategy
        if not (is_server(strategy, t.role) and t.role == WORKER and error.kind == failure.SYSTEM):
            return False
        name = actor_name(self.group.cfg.run.name, t.role, t.rank)
        # (Unavailable, not dead: it may be a host cut off that Ray has not declared dead yet.)
        if t.rank not in self.group.unavailable and nodes.is_alive(error.node_id):
            log.warning("lost %s (%s); the coordinator reschedules its work on the other workers", name,
                        error.message)
            return True
        log.warning("lost %s with its node; TF's coordinator cannot reschedule what was in flight on it: "
                    "restarting the attempt", name)
        return False

    def ask_save(self, count: int, timeout_s: float) -> dict[int, int]:
        version = self._get(self.bus.request_save.remote())
        reports = self._get(self.bus.wait_reports.remote(count, timeout_s), timeout_s)
        if len(reports) < count:
            log.warning("save request %d: %d of %d tasks answered in %gs", version, len(reports), count, timeout_s)
        return reports

    def decide(self, save_at: int) -> None:
        self._get(self.bus.decide.remote(save_at, True))

    def release(self) -> None:
        self._get(self.bus.request_stop.remote())

    def rest(self) -> list[ev.Event]:
        """The events still on the bus (the outstanding drain woken: it returns at once). May be called again (after
        also_failed's grace): the outstanding drain's events are taken once."""
        events = []
        if self._drain is not None:
            self.bus.wake_drains.remote()  # (nothing more is waited for: the drain returns now, not in poll_s)
            events, self._drain = self._get(self._drain, self.poll_s), None
        return events + self._get(self.bus.drain.remote(0))

    def also_failed(self, grace_s: float = 1.0) -> tuple[list[WorkerError], set[str]]:
        """Other tasks failing within `grace_s` of the first (a dead task's peers error out within
        milliseconds, and whichever is seen first, the death is the cause worth reporting), and the nodes
        whose tasks answered at all in that time."""
        pending = self.refs
        ready, _ = ray.wait(list(pending), num_returns=len(pending), timeout=grace_s) if pending else ([], [])
        errors = [e for e in (self.group.outcome(r, pending[r]) for r in ready) if e is not None]
        answered = {self.group.node_of(pending[r].rank) for r in ready if pending[r].rank not in self.group.unavailable}
        return errors, answered
