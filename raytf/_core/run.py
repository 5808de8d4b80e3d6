"""The run level as a state machine, pure like the attempt loop (_core/runloop.py): one launch's attempts, from
the first placement to the run's end. Each state carries its data; each input is a method that returns the next
state; the decisions (retry, shrink, grow, give up, a loss after training accepted) are made here. The driver
(_driver/driver.py) carries out what a state asks for and feeds back what happened.

    state          input                         next
    Placing        placed(size)                  Training (a size other than the last one's is a resize)
    Training       ended(done)                   Ended(succeeded)
    Training       ended(a failure)              Retrying (the policy and the budget say retry)
                                                 Ended(failed) (they say give up)
                                                 Ended(succeeded) (a task lost after training finished, its final
                                                 checkpoint committed: nothing is left to train)
    Retrying       resumed(checkpoint)           Placing (the next attempt)
    Training       ended(interrupted)            Ended(interrupted) (Ctrl-C: after the final save, or at once)
    Placing/Training  interrupted()              Ended(interrupted)
    Placing/Training  aborted(error)             Ended(failed) (placement or storage gave up: no retry)
    any            head_lost(why)                Ended(failed, or succeeded when only the teardown was left)
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from raytf._core import elastic, failure
from raytf._core.attempts import FAILED, INTERRUPTED, RUNNING, SUCCEEDED, Attempt, Done, End, Interrupted
from raytf._core.checkpoints import CheckpointEntry
from raytf.config import Config, owns_loop, script_mode
from raytf.errors import TrainingFailedError, WorkerError

log = logging.getLogger("raytf")

# What a task lost after training can be, and leave the run succeeded: a death, a lost peer, a hang (not an
# exception the program raised: that is its own code's failure, and the user must see it).
LOST = frozenset({failure.SYSTEM, failure.PEER, failure.HANG})
# attempt.decision of such a loss (the others: failure.Decision's "retry" and "raise").
ACCEPT = "accept"


@dataclass
class FailureBudget:
    """What one launch may retry, each counted apart against its own limit (-1: none): failures
    (failure.max_failures), preemptions (failure.max_preemptions) and elastic resizes
    (cluster.elastic.max_resizes)."""

    max_failures: int
    max_preemptions: int = -1
    max_resizes: int = 0
    failures: int = 0
    preemptions: int = 0
    resizes: int = 0

    @classmethod
    def of(cls, cfg: Config) -> FailureBudget:
        return cls(cfg.failure.max_failures, cfg.failure.max_preemptions, cfg.cluster.elastic.max_resizes)

    def may_resize(self) -> bool:
        """A flapping host cannot make the group resize forever."""
        return self.resizes < self.max_resizes

    def charge(self, kind: str) -> None:
        """A retry of a failure of `kind` (a resize is counted when the size changes: `Run.placed`)."""
        if kind == failure.PREEMPTED:
            self.preemptions += 1
        elif kind != failure.RESIZE:
            self.failures += 1

    def to_json(self) -> dict[str, int]:
        return {"failures": self.failures, "max_failures": self.max_failures, "preemptions": self.preemptions,
                "max_preemptions": self.max_preemptions, "resizes": self.resizes, "max_resizes": self.max_resizes}


@dataclass(frozen=True)
class AttemptEnd:
    """An attempt's end as the driver concluded it: the loop's `end`, and for any end but Done the errors that make
    it (the tasks' own WorkerErrors, a hang's with its stacks, a preemption's or a resize's)."""

    end: End
    errors: tuple[WorkerError, ...] = ()
    unreachable: frozenset[str] = frozenset()  # nodes whose tasks stopped answering: the next attempt avoids them
    node_lost: bool = False  # a node of the attempt is gone (Ray declared it dead, or it is unreachable)
    lost: tuple[tuple[int, WorkerError, float], ...] = ()  # tasks lost without ending it (PS workers), when


# -- the states ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Placing:
    """The attempt's group is to be placed: at the first size of `tries` that can be, away from `avoid`."""

    attempt: Attempt
    tries: tuple[elastic.Try, ...]
    avoid: frozenset[str] = frozenset()


@dataclass(frozen=True)
class Training:
    attempt: Attempt
    size: int


@dataclass(frozen=True)
class Retrying:
    """`attempt` failed and is retried: the checkpoint to resume from is to be chosen (and verified)."""

    attempt: Attempt
    verdict: failure.Verdict


@dataclass(frozen=True)
class Ended:
    status: str
    error: TrainingFailedError | None = None


State = Placing | Training | Retrying | Ended


@dataclass(frozen=True)
class Grow:
    """Elastic training, the group smaller than cluster.num_workers: grow if the `missing` workers' capacity is
    there (0: no look needed), saving at an agreed step first (`save_now`) or at the program's next commit."""

    save_now: bool
    missing: int


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
        self._avoid: frozenset[str] = frozenset()  # nodes the last failure left unreachable

    @property
    def attempt(self) -> Attempt | None:
        return self.attempts[-1] if self.attempts else None

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
        self.state = Placing(attempt, elastic.tries(self.cfg, self.size, self.budget.may_resize()), avoid)
        return self.state

    def placed(self, size: int, now: float) -> Training:
        """The group is placed at `size` workers (elastic training: a size other than the last is a resize)."""
        attempt = self.state.attempt
        if size != self.size:
            attempt.resize = elastic.GROW if size > self.size else elastic.SHRINK
            self.budget.resizes += 1
            log.warning("attempt %d: %d of %d workers (%s)", attempt.number, size, self.cfg.cluster.num_workers,
                        attempt.resize)
        self.size = size
        self._grow_checked = now
        attempt.num_workers = size
        self.state = Training(attempt, size)
        return self.state

    def trained(self) -> None:
        """The attempt's training is over (its loop ended Done) and only its teardown is left: a head lost now
        does not undo that."""
        self.state.attempt.status = SUCCEEDED

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
        attempt = self.state.attempt
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
        self._log_failure(attempt, root)
        attempt.decision, attempt.reason = verdict.decision.value, verdict.reason
        if verdict.decision is failure.Decision.RAISE:
            log.error("attempt %d failed (%s): %s; not retrying", attempt.number, attempt.cause, verdict.reason)
            self.error = error
            return self._end(FAILED, error)
        if attempt.cause != failure.RESIZE:  # (a grow's own line said why)
            log.warning("attempt %d failed (%s, %s %s): %s; restarting the group from %s", attempt.number,
                        attempt.cause, attempt.role, attempt.rank, verdict.reason,
                        latest.name if latest else "scratch")
        self._avoid = end.unreachable
        self.state = Retrying(attempt, verdict)
        return self.state

    def resumed(self, entry: CheckpointEntry | None) -> Placing:
        """The retry resumes from `entry` (the newest committed checkpoint whose files check out; None: scratch)."""
        return self._next(entry, self._avoid)

    def interrupted(self, now: float) -> Ended:
        """Ctrl-C (after the final save), or SIGTERM on the driver."""
        attempt = self.attempt
        if attempt is not None:
            attempt.status, attempt.cause = INTERRUPTED, INTERRUPTED
            attempt.ended = attempt.ended or now
        self.error = TrainingFailedError("interrupted by the user (KeyboardInterrupt)")
        return self._end(INTERRUPTED, self.error)

    def aborted(self, e: Exception, now: float) -> Ended:
        """Placement or storage gave up (a PlacementError, a StorageError): recorded, never retried."""
        attempt = self.attempt
        if attempt is not None:
            attempt.status, attempt.cause = FAILED, type(e).__name__
            attempt.ended = attempt.ended or now
        self.error = TrainingFailedError(str(e))
        return self._end(FAILED, self.error)

    def broke(self, e: BaseException, now: float) -> None:
        """Anything else ended the launch (raised to the caller): the attempt under way is not left running."""
        attempt = self.attempt
        if attempt is not None and attempt.status == RUNNING:
            attempt.status, attempt.cause = FAILED, type(e).__name__
            attempt.ended = attempt.ended or now
            self.error = TrainingFailedError(f"{type(e).__name__}: {e}")

    def head_lost(self, message: str, now: float) -> Ended:
        """The Ray head is gone (the driver leaves at once): succeeded when the attempt had trained and only its
        teardown was left."""
        attempt = self.attempt
        if attempt is not None and attempt.status == SUCCEEDED:
            return self._end(SUCCEEDED)
        if attempt is not None and attempt.status == RUNNING:
            attempt.status, attempt.cause, attempt.ended = FAILED, failure.HEAD_LOST, now
        self.error = TrainingFailedError(message)
        return self._end(FAILED, self.error)

    # -- the decisions' parts ------------------------------------------------------------------
    def _end(self, status: str, error: TrainingFailedError | None = None) -> Ended:
        self.state = Ended(status, error)
        return self.state

    def _lose(self, rank: int, error: WorkerError, attempt: Attempt, at: float) -> None:
        self.lost_tasks.append({"role": error.role, "rank": rank, "attempt": attempt.number, "time": at,
                                "cause": error.message})

    def _fail(self, attempt: Attempt, errors: list[WorkerError]) -> tuple[TrainingFailedError, WorkerError]:
        """The attempt's cause from the most informative of its errors (a death explains its peers' errors)."""
        root = errors[failure.root_cause([e.kind for e in errors])]
        attempt.cause, attempt.error_type = root.kind, root.error_type
        attempt.rank, attempt.role, attempt.node_id = root.rank, root.role, root.node_id
        error = TrainingFailedError(f"run {self.cfg.run.name} failed: {root}",
                                    {(e.role, e.rank): e for e in sorted(errors, key=lambda e: e is not root)})
        return error, root

    @staticmethod
    def _log_failure(attempt: Attempt, root: WorkerError) -> None:
        level = logging.WARNING if root.kind in (failure.PREEMPTED, failure.RESIZE) else logging.ERROR
        log.log(level, "attempt %d: %s failed: %s", attempt.number, root.role or "run", root)
        if (root.remote_traceback and root.kind != failure.CONFIG  # (a config error's line says all)
                and root.remote_traceback.splitlines()[-1] not in root.message):
            log.error("remote traceback (%s %d):\n%s", root.role, root.rank, root.remote_traceback)

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
