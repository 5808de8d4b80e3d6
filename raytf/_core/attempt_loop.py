"""One attempt's event loop as an explicit state machine (driven over a task group by _core/attempt_drive.py's
`drive`). Pure: no Ray, no TensorFlow.

Phases, once the attempt's tasks run; the last, ENDED, holds the attempt's end as a typed value
(_core.attempt_record.End: Done, Interrupted, Stopped, Hung, Failed):

    TRAINING ──a preemption notice, a node's drain, a task's memory, Ctrl-C, an elastic grow──────────▶ SAVING
       │  │                                                                  │ every task reported its step
       │  │                                                                  ▼
       │  │                                          STOPPING (all save at max(step) + 1, then stop)
       │  │                                                                  │ all stopped, or the deadline
       │  │                                                                  ▼
       │  │                            ENDED: Stopped(preempted | drain | resize | recycle, saved) / Interrupted(saved)
       │  ├──a task failed (not a tolerated PS worker)──▶ ENDED: Failed(errors)
       │  ├──a rank without progress for failure.hang_timeout_s──▶ ENDED: Hung(ranks)
       │  └──Ctrl-C (a second one, or nothing to save)──▶ ENDED: Interrupted(at_once)
       └──every task running user code returned──▶ DRAINING (servers released, the evaluator's last round)
                                                     │ all returned, or their grace is over
                                                     ▼
                                                    ENDED: Done

`AttemptLoop` only decides; `drive` (_core/attempt_drive.py) feeds it what the group reports (events, finished
tasks, the clock, Ctrl-C) and carries out the actions it returns (ask for a save, decide the step, release the
servers: _core/attempt_messages.py). Why the group stops early, and whether at an agreed step or at the program's
next commit, is the loop's `Stop` (_core/attempt_stop.py).
"""

from __future__ import annotations

import enum
import logging
from dataclasses import dataclass, field

from raytf._core import brief, failure
from raytf._core import events as ev
from raytf._core.attempt_messages import Action, AskSave, Decide, Finished, Release
from raytf._core.attempt_record import PROGRESS, Cause, Done, Drain, End, Failed, Hung, Interrupted, Recycle
from raytf._core.attempt_stop import Stop
from raytf._core.memory import MemoryWatch
from raytf.errors import WorkerError

log = logging.getLogger("raytf")


class Phase(str, enum.Enum):
    TRAINING = "training"
    SAVING = "saving"  # a save-now was asked: waiting for every task to report its step
    STOPPING = "stopping"  # every task saves at the agreed step, then stops
    DRAINING = "draining"  # training is over: the servers are released, the evaluator finishes
    ENDED = "ended"  # `AttemptLoop.end` says how


@dataclass(frozen=True)
class Timing:
    hang_timeout_s: float
    startup_timeout_s: float
    interrupt_timeout_s: float
    server_grace_s: float = 10.0
    evaluator_grace_s: float = 300.0


@dataclass
class AttemptLoop:
    """The decisions of one attempt's event loop. `primary`: rank -> role of the tasks running user code;
    `background`: rank -> role of the servers and the evaluator."""

    primary: dict[int, str]
    background: dict[int, str]
    timing: Timing
    attempt: int
    now: float
    save_on_interrupt: bool = True
    can_save_now: bool = True  # script mode cannot (a script owns its checkpoints)
    phase: Phase = Phase.TRAINING
    end: End | None = None  # once ENDED
    busy: dict[int, tuple[str, float, float]] = field(default_factory=dict)  # rank -> (what, until, allowance)
    lost: list[tuple[int, WorkerError, float]] = field(default_factory=list)  # tolerated PS workers, when
    # Each task's memory against its limit (failure.max_task_rss_gb): none by default.
    memory: MemoryWatch = field(default_factory=lambda: MemoryWatch({}))
    watched: dict[int, float] = field(init=False)  # rank -> last progress (driver clock)
    running: set[int] = field(init=False)  # primary ranks whose call has not returned
    serving: set[int] = field(init=False)  # background ranks whose call has not returned
    deadline: float | None = None  # of a save-and-stop, of a script's drain, or of draining
    stop: Stop = field(default_factory=Stop)  # why every task is to save and stop, and what waits for a commit

    def __post_init__(self) -> None:
        # Before its first heartbeat a rank gets the start-up allowance on top of the hang timeout.
        self.watched = {r: self.now + self.timing.startup_timeout_s for r in self.primary}
        self.running = set(self.primary)
        self.serving = set(self.background)

    @property
    def drain(self) -> Drain | None:
        """The drain notice acted on (one per attempt)."""
        return self.stop.drain

    @property
    def done(self) -> bool:
        return self.phase is Phase.ENDED

    def _ended(self, end: End) -> list[Action]:
        self.phase, self.end = Phase.ENDED, end
        return []

    # -- inputs --------------------------------------------------------------------------------
    def on_events(self, events: list[ev.Event], now: float) -> list[Action]:
        self.now = now
        actions: list[Action] = []
        for e in events:
            if e.attempt != self.attempt:
                continue
            if e.kind in PROGRESS and e.rank in self.watched:
                self.watched[e.rank] = now  # any progress, heartbeats included, clears a rank of hanging
            if e.kind == ev.BUSY and e.rank in self.watched and e.payload.allow_s > 0:
                allow = float(e.payload.allow_s)
                self.busy[e.rank] = (e.payload.what or "busy", now + allow, allow)
            elif (e.kind == ev.BUSY or e.kind in (ev.STEP, ev.EPOCH)) and self.busy.pop(e.rank, None):
                self._wait_over(now)
            if e.kind == ev.CHECKPOINT and self.phase is Phase.TRAINING \
                    and (cause := self.stop.on_commit()) is not None:
                actions += self._end_stop(saved=True, cause=cause)
                continue
            if e.kind == ev.STEP and self.phase is Phase.TRAINING and self.stop.recycle is None \
                    and (recycle := self.memory.observe(e, now)) is not None:
                actions += self._recycle_now(recycle)
            if e.kind == ev.PREEMPTED and self.phase is Phase.TRAINING:
                log.warning("%s %d got a preemption notice (SIGTERM)", e.role, e.rank)
                self.stop.notice = e
                actions += self._save_and_stop(Cause.PREEMPTED)
        return actions

    def _wait_over(self, now: float) -> None:
        """A rank is no longer busy: the ranks that were blocked on it, silent or busy themselves, start their
        hang clocks (or their allowances) afresh."""
        self.watched = {r: max(t, now) for r, t in self.watched.items()}
        self.busy = {r: (what, max(until, now + allow), allow) for r, (what, until, allow) in self.busy.items()}

    def on_grow(self, now: float, save_now: bool) -> list[Action]:
        """Capacity for the full size is back (elastic training): stop, to restart bigger. `save_now`: every task
        saves at an agreed step first (nothing is lost); otherwise the group stops once the program's next
        checkpoint is committed."""
        self.now = now
        if self.phase is not Phase.TRAINING or Cause.RESIZE in self.stop.at_commit:
            return []
        if save_now and self.can_save_now:
            log.warning("capacity for the full size is back: every task saves at an agreed step, then the group "
                        "restarts at full size")
            return self._save_and_stop(Cause.RESIZE)
        log.warning("capacity for the full size is back: the group restarts at full size after its next checkpoint")
        self.stop.at_commit.add(Cause.RESIZE)
        return []

    def _recycle_now(self, recycle: Recycle) -> list[Action]:
        """A task's memory grew past its limit (memory.MemoryWatch): every task saves at an agreed step and the
        group restarts in fresh processes; a script's, after its next commit."""
        self.stop.recycle = recycle
        if not self.can_save_now:
            log.warning("a script writes its own checkpoints: the group restarts in fresh processes after its next "
                        "commit")
            self.stop.at_commit.add(Cause.RECYCLE)
            return []
        log.warning("every task saves at an agreed step, then the group restarts in fresh processes")
        return self._save_and_stop(Cause.RECYCLE)

    def on_drain(self, drain: Drain, now: float) -> list[Action]:
        """Ray drains a node that holds some of the tasks (a spot node's notice, with a deadline): every task saves
        at an agreed step and the group stops, to restart off that node (raytf issue 52: waiting for the node to go
        lost the steps since the last periodic checkpoint). A script, which cannot save at a step, stops at its next
        commit, or at the deadline if that comes first."""
        self.now = now
        if self.phase is not Phase.TRAINING or self.stop.drain is not None:
            return []
        self.stop.drain = drain
        left = f"its deadline in {drain.deadline - now:.0f}s" if drain.deadline is not None else "no deadline"
        ranks = brief.few([*(f"{self.primary.get(r) or self.background.get(r)} {r}" for r in drain.ranks),
                           *(f"the tf.data service's {name}" for name in drain.servers)])
        log.warning("node %s is being drained (%s), with %s on it", drain.node[:12], left, ranks)
        if not self.can_save_now:
            log.warning("a script writes its own checkpoints: the group moves off the node at its next commit%s",
                        ", or at the deadline" if drain.deadline is not None else "")
            self.stop.at_commit.add(Cause.DRAIN)
            self.deadline = drain.deadline
            return []
        log.warning("every task saves at an agreed step, then the group restarts off the node")
        actions = self._save_and_stop(Cause.DRAIN)
        if drain.deadline is not None and self.deadline is not None:
            self.deadline = min(self.deadline, drain.deadline)
        return actions

    def on_finished(self, f: Finished, now: float) -> list[Action]:
        self.now = now
        self.watched.pop(f.rank, None)
        if self.busy.pop(f.rank, None):
            self._wait_over(now)
        self.running.discard(f.rank)
        self.serving.discard(f.rank)
        if f.error is not None and f.alone:
            self.lost.append((f.rank, f.error, now))
            return [] if self.done else self._progress()
        if self.done:  # (another task's outcome in the same round: one more error of a failure)
            if f.error is not None and isinstance(self.end, Failed):
                self.end = Failed((*self.end.errors, f.error))
            return []
        if f.error is not None:
            if self.phase is Phase.STOPPING:  # a task that fails while stopping: the save did not complete
                return self._end_stop(saved=False)
            if self.phase is Phase.SAVING and self.stop.cause in (Cause.PREEMPTED, Cause.DRAIN, Cause.RESIZE,
                                                                  Cause.RECYCLE):
                return self._end_stop(saved=False)
            lost = f.error.kind in (failure.SYSTEM, failure.PEER)  # (a task, or a peer's link to it)
            if self.phase is Phase.TRAINING and Cause.DRAIN in self.stop.at_commit and lost:
                # A script's drain: the node went before the script's next commit.
                return self._end_stop(saved=False, cause=Cause.DRAIN)
            return self._ended(Failed((f.error,)))
        return self._progress()

    def on_tick(self, now: float) -> list[Action]:
        self.now = now
        if self.phase is Phase.TRAINING:
            if Cause.DRAIN in self.stop.at_commit and self.deadline is not None and now > self.deadline:
                log.warning("node %s's drain deadline came before the script's next commit: the group moves off "
                            "it now; the script's last synced checkpoint stands", self.stop.drain.node[:12])
                return self._end_stop(saved=False, cause=Cause.DRAIN)
            if self.busy:
                # Healthy ranks go silent in their next collective while a peer uploads or exports, and a busy
                # rank may itself wait on a busy peer (the model's export is collective under MWMS: a worker,
                # allowed the hang timeout alone, waits in it on the chief, allowed its model's bytes too). So the
                # group is hung only once no busy rank is within its allowance; the busy ranks are named.
                hung = sorted(self.busy) if all(now > until for _, until, _ in self.busy.values()) else []
            else:
                hung = failure.stale_ranks(self.watched, now, self.timing.hang_timeout_s)
            if hung:
                return self._ended(Hung(tuple(hung), {r: self.busy[r][0] for r in hung if r in self.busy}))
            return []
        if self.deadline is not None and now > self.deadline:
            if self.phase is Phase.SAVING or self.phase is Phase.STOPPING:
                log.warning("the save-and-stop did not complete within checkpoint.interrupt_timeout_s=%gs",
                            self.timing.interrupt_timeout_s)
                return self._end_stop(saved=False)
            if self.phase is Phase.DRAINING:
                if any(self.background[r] == "evaluator" for r in self.serving):
                    log.warning("the evaluator did not finish within cluster.evaluator.finish_timeout_s=%gs; "
                                "stopping it", self.timing.evaluator_grace_s)
                return self._ended(Done())
        return []

    def on_interrupt(self, now: float) -> list[Action]:
        """Ctrl-C (or SIGTERM on the driver). A second one, or one while already stopping, ends at once."""
        self.now = now
        if self.phase is Phase.TRAINING and self.save_on_interrupt and self.running:
            if not self.can_save_now:
                log.warning("interrupted: stopping the script; it writes its own checkpoints, and the last one it "
                            "synced stands (no save at an agreed step for scripts)")
                return self._end_stop(saved=False, cause=Cause.INTERRUPTED)
            log.warning("interrupted: saving a final checkpoint (Ctrl-C again to stop at once)")
            return self._save_and_stop(Cause.INTERRUPTED)
        if self.phase in (Phase.SAVING, Phase.STOPPING):
            log.warning("second interrupt: tearing down now")
        return self._ended(Interrupted(saved=False, at_once=True))

    def on_reports(self, reports: dict[int, int], now: float) -> list[Action]:
        """The tasks' steps in answer to AskSave (as many as answered within its timeout)."""
        self.now = now
        if self.phase is not Phase.SAVING:
            return []
        if len(reports) < len(self.running) or not reports:
            log.warning("save request: %d of %d tasks answered within checkpoint.interrupt_timeout_s",
                        len(reports), len(self.running))
            return self._end_stop(saved=False)
        save_at = max(reports.values()) + 1  # no task can have passed it: collectives keep them within a step
        log.warning("every task saves at step %d, then stops", save_at)
        self.phase = Phase.STOPPING
        self.watched = {}  # tasks block while the decision travels, then save: not a hang
        return [Decide(save_at)]

    # -- transitions ---------------------------------------------------------------------------
    def _save_and_stop(self, cause: Cause) -> list[Action]:
        self.stop.cause = cause
        self.deadline = self.now + self.timing.interrupt_timeout_s
        if not self.can_save_now:
            log.warning("a script writes its own checkpoints (no save at an agreed step): the last one it synced "
                        "stands")
            return self._end_stop(saved=False)
        self.phase = Phase.SAVING
        return [AskSave(len(self.running), self.timing.interrupt_timeout_s)]

    def _end_stop(self, saved: bool, cause: Cause | None = None) -> list[Action]:
        """The group stopped: for `cause` (one decided now), or for the save-and-stop's."""
        if cause is not None:
            self.stop.cause = cause
        return self._ended(self.stop.end(saved))

    def _progress(self) -> list[Action]:
        if self.running:
            return []
        if self.phase is Phase.STOPPING:
            return self._end_stop(saved=True)
        if self.phase is Phase.TRAINING:
            self.phase = Phase.DRAINING
            servers = any(self.background[r] != "evaluator" for r in self.serving)
            grace = self.timing.evaluator_grace_s if any(self.background[r] == "evaluator" for r in self.serving) \
                else self.timing.server_grace_s if servers else 0.0
            self.deadline = self.now + grace
            if not self.serving:
                self._ended(Done())
            return [Release()]
        if self.phase is Phase.DRAINING and not self.serving:
            return self._ended(Done())
        return []
