"""The run level as a state machine, pure like the attempt loop (_core/attempt_loop.py): one launch's attempts,
from the first placement to the run's end. Each state carries its data (_core/run_states.py); each input is a
method that returns the next state; the decisions (retry, shrink, grow, give up, a loss after training accepted)
are made here, within the run's FailureBudget (_core/budget.py). The driver (_driver/driver.py) carries out what a
state asks for and feeds back what happened.

    state          input                         next
    (none)         begin(checkpoint)             Placing (the first attempt)
    Placing        placed(size)                  Training (a size other than the last one's is a resize)
    Training       trained()                     Training (its loop ended Done: only the teardown is left)
    Training       ended(done)                   Ended(succeeded)
    Training       ended(a failure)              Retrying (the policy and the budget say retry)
                                                 Ended(failed) (they say give up)
                                                 Ended(succeeded) (a task lost after training finished, its final
                                                 checkpoint committed: nothing is left to train)
    Retrying       resumed(checkpoint)           Placing (the next attempt)
    Training       ended(interrupted)            Ended(interrupted) (Ctrl-C: after the final save, or at once)
    any but Ended  interrupted()                 Ended(interrupted)
    any but Ended  aborted(error)                Ended(failed) (placement or storage gave up: no retry)
    any but Ended  broke(error)                  Ended(failed) (anything else ended the launch)
    any but Ended  head_lost(why)                Ended(failed, or succeeded when only the teardown was left)

Every change of state goes through one method (`Run._to`, as Ray Train's controller `_set_state`): it refuses a
transition the table above does not have (InvalidTransition: a bug of the caller's, never a run's outcome) and logs
each one. The driver's main thread makes every change but one: the head watch's verdict (`head_lost`), given to
the driver from its thread when the main thread may be blocked on the lost cluster for good; `_to` holds a lock.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from typing import Any

from raytf._core import elastic, failure, tracebacks
from raytf._core.attempt_record import FAILED, INTERRUPTED, RUNNING, SUCCEEDED, Attempt, Done, Interrupted, Stopped
from raytf._core.budget import FailureBudget
from raytf._core.checkpoints import CheckpointEntry
from raytf._core.run_states import (
    NEXT,
    AttemptEnd,
    Ended,
    Grow,
    InvalidTransition,
    Placing,
    Retrying,
    State,
    Training,
)
from raytf.config import Config, owns_loop, script_mode
from raytf.errors import TrainingFailedError, WorkerError

log = logging.getLogger("raytf")

# What a task lost after training can be, and leave the run succeeded: a death, a lost peer, a hang (not an
# exception the program raised: that is its own code's failure, and the user must see it).
LOST = frozenset({failure.SYSTEM, failure.PEER, failure.HANG})
# attempt.decision of such a loss (the others: failure.Decision's "retry" and "raise").
ACCEPT = "accept"


@dataclass
class Run:
    """One launch's attempts. `previous`: how many attempts earlier launches of the run made."""

    cfg: Config
    previous: int = 0
    resumed_from: CheckpointEntry | None = None
    attempts: list[Attempt] = field(default_factory=list)
    lost_tasks: list[dict[str, Any]] = field(default_factory=list)  # tasks lost without failing the run
    error: TrainingFailedError | None = None
    state: State | None = None

    def __post_init__(self) -> None:
        self.budget = FailureBudget.of(self.cfg)
        self.script = script_mode(self.cfg)  # (for the policy's wording)
        self.owns_loop = owns_loop(self.cfg)  # a script or a Ray Train loop: its epochs and saves are its own
        self.size = self.cfg.cluster.num_workers  # the size of the group last placed
        self._grow_checked = 0.0
        self._lock = threading.RLock()  # (the head watch's verdict comes from its own thread)

    @property
    def attempt(self) -> Attempt | None:
        return self.attempts[-1] if self.attempts else None

    def _to(self, state: State, expect: tuple[type, ...] | None = None) -> State:
        """The one change of state: allowed by the table (and, `expect`, from one of those states), logged."""
        with self._lock:
            before = type(self.state) if self.state is not None else None
            if (expect is not None and before not in expect) or type(state) not in NEXT[before]:
                raise InvalidTransition(f"run {self.cfg.run.name}: {before.__name__ if before else 'no state'} -> "
                                        f"{type(state).__name__} is not a transition of a run")
            log.debug("run %s: %s -> %s", self.cfg.run.name, before.__name__ if before else "start",
                      _describe(state))
            self.state = state
            return state

    def _current(self, *kinds: type) -> State:
        """The state, which must be one of `kinds` (an input given in another is the caller's bug)."""
        if not isinstance(self.state, kinds):
            raise InvalidTransition(f"run {self.cfg.run.name}: expected {' or '.join(k.__name__ for k in kinds)}, "
                                    f"in {type(self.state).__name__ if self.state is not None else 'no state'}")
        return self.state

    def begin(self, resumed_from: CheckpointEntry | None) -> Placing:
        """The first attempt (resuming from `resumed_from`, a verified checkpoint)."""
        sizes = elastic.sizes(self.cfg)
        if elastic.is_elastic(self.cfg) and sizes.skipped:
            log.warning("cluster.elastic.keep_global_batch: %s worker(s) skipped: the global batch (%d x %d) does "
                        "not divide among them", ", ".join(map(str, sizes.skipped)), self.cfg.train.batch_size,
                        self.cfg.cluster.num_workers)
        return self._next(resumed_from, frozenset())

    def _next(self, resumed_from: CheckpointEntry | None, avoid: frozenset[str]) -> Placing:
        self.resumed_from = resumed_from
        attempt = Attempt(self.previous + len(self.attempts) + 1, len(self.attempts) + 1,
                          resumed_from=resumed_from.name if resumed_from else None,
                          epoch_target=None if self.owns_loop else self.cfg.train.epochs)
        self.attempts.append(attempt)
        if resumed_from is not None:
            log.info("attempt %d: resuming %s from %s", attempt.number, self.cfg.run.name, resumed_from.name)
        return self._to(Placing(attempt, elastic.tries(self.cfg, self.size, self.budget.may_resize()), avoid))

    def placed(self, size: int, now: float) -> Training:
        """The group is placed at `size` workers (elastic training: a size other than the last is a resize)."""
        attempt = self._current(Placing).attempt
        if size != self.size:
            attempt.resize = elastic.GROW if size > self.size else elastic.SHRINK
            self.budget.resizes += 1
            log.warning("attempt %d: %d of %d workers (%s)", attempt.number, size, self.cfg.cluster.num_workers,
                        attempt.resize)
        self.size = size
        self._grow_checked = now
        attempt.num_workers = size
        return self._to(Training(attempt, size), expect=(Placing,))

    def trained(self) -> Training:
        """The attempt's training is over (its loop ended Done) and only its teardown is left: a head lost now
        does not undo that."""
        state = self._current(Training)
        state.attempt.status = SUCCEEDED
        return self._to(state, expect=(Training,))

    def grow_check(self, now: float, tolerated: int) -> Grow | None:
        """While training smaller than cluster.num_workers (elastic), every cluster.elastic.grow_check_s: whether
        to look for the missing workers. `tolerated`: ParameterServerStrategy workers the coordinator went on
        without (their process died, their host is up), whose bundles stay reserved."""
        cfg = self.cfg
        if not elastic.is_elastic(cfg):
            return None
        if self.size - tolerated >= cfg.cluster.num_workers or not self.budget.may_resize():
            return None
        if now - self._grow_checked < cfg.cluster.elastic.grow_check_s:
            return None
        self._grow_checked = now
        if tolerated and self.size >= cfg.cluster.num_workers:
            self.size -= tolerated  # (so the restart at full size is recorded as a grow)
            return Grow(save_now=False, missing=0)  # a ParameterServerStrategy chief saves on its own schedule
        return Grow(save_now=elastic.grows_by_saving_now(cfg, self.owns_loop),
                    missing=cfg.cluster.num_workers - self.size)

    def ended(self, end: AttemptEnd, *, latest: CheckpointEntry | None, now: float) -> Ended | Retrying:
        """The attempt is over (its group torn down): succeeded, retried, or the run ends. `latest`: the newest
        committed checkpoint now (read only for an end that is not Done)."""
        attempt = self._current(Training).attempt
        attempt.ended = now
        for rank, error, at in end.lost:
            self._lose(rank, error, attempt, at)
        if isinstance(end.end, Done):
            attempt.status = SUCCEEDED
            return self._end(SUCCEEDED)
        if isinstance(end.end, Interrupted):
            return self.interrupted(now)
        error, root = self._fail(attempt, list(end.errors))
        attempt.status = FAILED
        if isinstance(end.end, Stopped) and end.end.drain is not None:
            attempt.drain = end.end.drain.record(end.end.saved, attempt.last_commit_at)
        if isinstance(end.end, Stopped) and end.end.recycle is not None:
            attempt.recycle = end.end.recycle.record(end.end.saved)
        verdict = failure.decide(kind=attempt.cause or failure.SYSTEM, error_type=attempt.error_type or "",
                                 attempt=attempt.index, progressed=attempt.first_step_at is not None,
                                 failures_so_far=self.budget.failures, cfg=self.cfg.failure,
                                 trained=attempt.training_finished, script=self.script,
                                 preemptions_so_far=self.budget.preemptions)
        resizable = elastic.is_elastic(self.cfg) and self.budget.may_resize()
        if end.node_lost and resizable and not attempt.training_finished:
            # Elastic training: a node lost is a capacity change, not an error of the program: the group restarts
            # with the workers that can be placed, bounded by cluster.elastic.max_resizes, not failure.max_failures.
            verdict = failure.Verdict(failure.Decision.RETRY, "a lost node (elastic: the group restarts with the "
                                                              "workers that can be placed)")
        elif verdict.decision is failure.Decision.RETRY:
            self.budget.charge(attempt.cause)
        attempt.account_loss(latest.step if latest else 0)
        if self._finished_before(attempt, root, latest):
            return self._accept_loss(attempt, root, latest)
        ends = verdict.decision is failure.Decision.RAISE
        # A refusal raytf raised itself (failure.CONFIG_ERRORS) that ends the run: its one line is the run's last,
        # said once (raytf issue 72: it was said three times).
        if not (ends and root.kind == failure.CONFIG and root.error_type in failure.CONFIG_ERRORS):
            self._log_failure(attempt, root)
        attempt.decision, attempt.reason = verdict.decision.value, verdict.reason
        if ends:
            log.error("attempt %d failed (%s): %s; not retrying", attempt.number, attempt.cause, verdict.reason)
            self.error = error
            return self._end(FAILED, error)
        if attempt.cause != failure.RESIZE:  # (a grow's own line said why)
            log.warning("attempt %d failed (%s, %s %s): %s; restarting the group from %s", attempt.number,
                        attempt.cause, attempt.role, attempt.rank, verdict.reason,
                        latest.name if latest else "scratch")
        return self._to(Retrying(attempt, verdict, end.unreachable))

    def resumed(self, entry: CheckpointEntry | None) -> Placing:
        """The retry resumes from `entry` (the newest committed checkpoint whose files check out; None: scratch)."""
        return self._next(entry, self._current(Retrying).avoid)

    def interrupted(self, now: float) -> Ended:
        """Ctrl-C (after the final save), or SIGTERM on the driver."""
        if (over := self._over()) is not None:
            return over
        attempt = self.attempt
        if attempt is not None:
            attempt.status, attempt.cause = INTERRUPTED, INTERRUPTED
            attempt.ended = attempt.ended or now
        self.error = TrainingFailedError("interrupted by the user (KeyboardInterrupt)")
        return self._end(INTERRUPTED, self.error)

    def aborted(self, e: Exception, now: float) -> Ended:
        """Placement or storage gave up (a PlacementError, a StorageError): recorded, never retried."""
        if (over := self._over()) is not None:
            return over
        attempt = self.attempt
        if attempt is not None:
            attempt.status, attempt.cause = FAILED, type(e).__name__
            attempt.ended = attempt.ended or now
        self.error = TrainingFailedError(str(e))
        return self._end(FAILED, self.error)

    def broke(self, e: BaseException, now: float) -> Ended:
        """Anything else ended the launch (raised to the caller): the attempt under way is not left running."""
        if (over := self._over()) is not None:
            return over
        attempt = self.attempt
        if attempt is not None and attempt.status == RUNNING:
            attempt.status, attempt.cause = FAILED, type(e).__name__
            attempt.ended = attempt.ended or now
        self.error = self.error or TrainingFailedError(f"{type(e).__name__}: {e}")
        return self._end(FAILED, self.error)

    def head_lost(self, message: str, now: float) -> Ended:
        """The Ray head is gone (the driver leaves at once): succeeded when the attempt had trained and only its
        teardown was left."""
        if (over := self._over()) is not None:
            return over
        attempt = self.attempt
        if attempt is not None and attempt.status == SUCCEEDED:
            return self._end(SUCCEEDED)
        if attempt is not None and attempt.status == RUNNING:
            attempt.status, attempt.cause, attempt.ended = FAILED, failure.HEAD_LOST, now
        self.error = TrainingFailedError(message)
        return self._end(FAILED, self.error)

    # -- the decisions' parts ------------------------------------------------------------------
    def _end(self, status: str, error: TrainingFailedError | None = None) -> Ended:
        return self._to(Ended(status, error))

    def _over(self) -> Ended | None:
        """The end already reached, for a verdict that comes second (the head watch's and the main thread's race:
        the first one stands)."""
        return self.state if isinstance(self.state, Ended) else None

    def _lose(self, rank: int, error: WorkerError, attempt: Attempt, at: float) -> None:
        self.lost_tasks.append({"role": error.role, "rank": rank, "attempt": attempt.number, "time": at,
                                "cause": error.message})

    def _fail(self, attempt: Attempt, errors: list[WorkerError]) -> tuple[TrainingFailedError, WorkerError]:
        """The attempt's cause from the most informative of its errors (a death explains its peers' errors)."""
        root = errors[failure.root_cause([e.kind for e in errors])]
        attempt.cause, attempt.error_type = root.kind, root.error_type
        attempt.rank, attempt.role, attempt.node_id = root.rank, root.role, root.node_id
        if root.kind == failure.DRIVER:
            attempt.traceback = root.remote_traceback
        error = TrainingFailedError(f"run {self.cfg.run.name} failed: {root}",
                                    {(e.role, e.rank): e for e in sorted(errors, key=lambda e: e is not root)})
        return error, root

    @staticmethod
    def _log_failure(attempt: Attempt, root: WorkerError) -> None:
        level = logging.WARNING if root.kind in (failure.PREEMPTED, failure.DRAIN, failure.RESIZE, failure.RECYCLE) \
            else logging.ERROR
        log.log(level, "attempt %d: %s failed: %s", attempt.number, root.role or "run", root)
        if (root.remote_traceback and root.kind not in (failure.CONFIG, failure.STORAGE)  # (their line says all)
                and root.remote_traceback.splitlines()[-1] not in root.message):
            # (Bounded: a message that dumps a tensor is tens of lines of values; the task's log has them.)
            log.error("remote traceback (%s %d):\n%s", root.role, root.rank,
                      tracebacks.bounded_traceback(root.remote_traceback))

    @staticmethod
    def _finished_before(attempt: Attempt, root: WorkerError, latest: CheckpointEntry | None) -> bool:
        """A task lost after the last epoch, the final checkpoint committed: nothing is left to train (a retry
        would train nothing, a relaunch resume from that checkpoint and stop), so the run has succeeded."""
        return (attempt.training_finished and root.kind in LOST and latest is not None
                and attempt.epoch_target is not None and latest.epoch >= attempt.epoch_target)

    def _accept_loss(self, attempt: Attempt, root: WorkerError, latest: CheckpointEntry) -> Ended:
        attempt.status, attempt.decision = SUCCEEDED, ACCEPT
        attempt.reason = (f"training had finished its last epoch and its final checkpoint {latest.name} is "
                          f"committed: the run succeeded; {root.role} {root.rank} was lost after it ({root.kind})")
        self._lose(root.rank, root, attempt, attempt.ended)
        log.warning("attempt %d: %s %d was lost after training finished (%s); its final checkpoint %s is committed: "
                    "the run succeeded", attempt.number, root.role, root.rank, root.message.splitlines()[0],
                    latest.name)
        return self._end(SUCCEEDED)


def _describe(state: State) -> str:
    if isinstance(state, Ended):
        return f"Ended({state.status})"
    return f"{type(state).__name__}(attempt {state.attempt.number})"
