"""One attempt at training: how it can end (a typed value, `End`) and its record, as kept in result.json's
`attempts`."""

from __future__ import annotations

import enum
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from raytf._core import checkpoints, failure
from raytf._core import events as ev
from raytf.errors import WorkerError

# A run's and an attempt's status (result.json's `status`, Result.status).
SUCCEEDED, FAILED, INTERRUPTED, RUNNING = "succeeded", "failed", "interrupted", "running"

PROGRESS = (ev.STEP, ev.EPOCH, ev.HEARTBEAT, ev.CHECKPOINT)


# -- how an attempt's tasks stop: the attempt loop's end (_core/attempt_loop.py) ---------------------------
class Cause(str, enum.Enum):
    """Why every task saved at an agreed step (or tried to) and stopped."""

    PREEMPTED = "preempted"  # a task got a preemption notice (SIGTERM): failure.PREEMPTED
    DRAIN = "drain"  # Ray drains a node that holds a task (a spot node's notice, with a deadline): failure.DRAIN
    RESIZE = "resize"  # elastic training: capacity for the full size is back (a grow): failure.RESIZE
    RECYCLE = "recycle"  # a task's memory grew past failure.max_task_rss_gb (_core/memory.py): failure.RECYCLE
    INTERRUPTED = "interrupted"  # Ctrl-C (or SIGTERM) on the driver


@dataclass(frozen=True)
class Done:
    """Every task running user code returned; the servers and the evaluator were released."""


@dataclass(frozen=True)
class Interrupted:
    """Ctrl-C: after a save at an agreed step (`saved`: it completed), or at once (`at_once`: a second Ctrl-C, or
    one with nothing to save; no more events are read)."""

    saved: bool = False
    at_once: bool = False


@dataclass(frozen=True)
class Drain:
    """A drain notice acted on: Ray drains `node` (a cloud's or KubeRay's spot preemption, an autoscaler's
    scale-down), which holds the attempt's `ranks` and the tf.data service's `servers` (their names), until
    `deadline` (epoch seconds; None: Ray gave none); seen by the driver at `seen_at`. Ray schedules nothing new on a
    draining node: the next attempt (its tasks, and the service's servers) is placed elsewhere."""

    node: str
    ranks: tuple[int, ...]
    deadline: float | None
    seen_at: float
    servers: tuple[str, ...] = ()

    @classmethod
    def first(cls, tasks: dict[str, list[int]], servers: dict[str, list[str]], draining: dict[str, float | None],
              now: float) -> Drain | None:
        """The drain to act on, if any: the first node Ray drains (`draining`: node -> deadline) that holds a task
        (`tasks`: node -> ranks) or a server of the tf.data service (`servers`: node -> names). A drain of a node
        the run does not use changes nothing."""
        for node in sorted((set(tasks) | set(servers)) & set(draining)):
            return cls(node, tuple(sorted(tasks.get(node, ()))), draining[node], now,
                       tuple(sorted(servers.get(node, ()))))
        return None

    def record(self, saved: bool, committed_at: float | None) -> dict[str, Any]:
        """result.json's `drain` of the attempt: the notice and, when the save committed, how long after the notice
        and before the deadline."""
        out: dict[str, Any] = {"node": self.node, "ranks": list(self.ranks), "deadline_at": self.deadline,
                               "seen_at": self.seen_at, "saved": saved}
        if self.servers:
            out["servers"] = list(self.servers)
        if saved and committed_at is not None:
            out["save_after_notice_s"] = round(committed_at - self.seen_at, 3)
            if self.deadline is not None:
                out["save_before_deadline_s"] = round(self.deadline - committed_at, 3)
        return out


def _rounded_up(gib: float, digits: int) -> float:
    """`gib` rounded up, not to nearest: a use just past its limit (1.6004 against 1.6) must not read as the limit.
    (The 1e-9 keeps a binary float's excess, 2.61 * 100 = 261.00000000000003, from rounding 2.61 up to 2.62.)"""
    return math.ceil(gib * 10 ** digits - 1e-9) / 10 ** digits


@dataclass(frozen=True)
class Recycle:
    """A task's resident memory grew past its limit (failure.max_task_rss_gb, _core/memory.py): `rank` (its `role`)
    used `rss_gib` at `step`, against `limit_gib`, having started the attempt at `start_gib`; seen at `seen_at`."""

    rank: int
    role: str
    rss_gib: float
    limit_gib: float
    start_gib: float
    step: int
    seen_at: float

    def record(self, saved: bool) -> dict[str, Any]:
        """result.json's `recycle` of the attempt."""
        return {"rank": self.rank, "role": self.role, "rss_gib": _rounded_up(self.rss_gib, 3),
                "limit_gib": round(self.limit_gib, 3), "start_gib": round(self.start_gib, 3), "step": self.step,
                "seen_at": self.seen_at, "saved": saved}


@dataclass(frozen=True)
class Stopped:
    """The tasks were stopped to restart (a preemption notice, a node's drain, an elastic grow, a task's memory),
    after a save at an agreed step or at the program's next commit (`saved`: it completed). `notice`: the
    preemption notice acted on; `drain`: the drain; `recycle`: the memory that grew."""

    cause: Cause
    saved: bool = False
    notice: ev.Event | None = None
    drain: Drain | None = None
    recycle: Recycle | None = None

    def error(self, num_workers: int, node_of: Callable[[int], str], role_of: Callable[[int], str | None]
              ) -> WorkerError:
        """The failure that explains the stop (its kind: failure.RESIZE, RECYCLE, DRAIN or PREEMPTED), for the run's
        record and the budget; `num_workers`: the run's cluster.num_workers, `node_of(rank)` and `role_of(rank)` (None:
        not known) the group's."""
        saved = "saved at an agreed step" if self.saved else "could not save"
        if self.cause is Cause.RESIZE:
            return WorkerError(f"capacity for {num_workers} workers is back: restarting at full size from "
                               f"{'a save at an agreed step' if self.saved else 'the latest checkpoint'}",
                               role="group", kind=failure.RESIZE)
        if self.cause is Cause.RECYCLE and (r := self.recycle) is not None:
            used = _rounded_up(r.rss_gib, 2)
            return WorkerError(f"uses {used:.2f} GiB of memory, past failure.max_task_rss_gb ({r.limit_gib:g} "
                               f"GiB for it); {saved} before restarting in fresh processes", role=r.role, rank=r.rank,
                               node_id=node_of(r.rank), kind=failure.RECYCLE)
        if self.cause is Cause.DRAIN and (d := self.drain) is not None:
            deadline = f"its deadline {d.deadline - d.seen_at:.0f}s after the notice" if d.deadline else "no deadline"
            role = (role_of(d.ranks[0]) if d.ranks else None) or ("tf.data service" if d.servers else "group")
            return WorkerError(f"node {d.node[:12]} is being drained ({deadline}); {saved} before moving off it",
                               role=role, rank=d.ranks[0] if d.ranks else -1, node_id=d.node, kind=failure.DRAIN)
        e = self.notice
        step = e.payload.step if e is not None else None
        return WorkerError(f"preempted (SIGTERM) at step {step}; {'saved' if self.saved else 'could not save'} "
                           "before stopping", role=e.role if e else "", rank=e.rank if e else -1,
                           node_id=node_of(e.rank) if e else "", kind=failure.PREEMPTED)


@dataclass(frozen=True)
class Hung:
    """Ranks without progress for failure.hang_timeout_s (`busy`: rank -> what it said it was busy with)."""

    ranks: tuple[int, ...]
    busy: dict[int, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Failed:
    """A task failed (the driver adds those that failed within a second of it)."""

    errors: tuple[WorkerError, ...]


End = Done | Interrupted | Stopped | Hung | Failed


@dataclass
class Attempt:
    """One try at training within a launch; serialised into result.json's `attempts`."""

    number: int  # across launches of the run
    index: int  # within this launch, from 1
    resumed_from: str | None = None
    # The workers this attempt trained with (elastic training: fewer than cluster.num_workers while hosts are
    # lost), and why it differs from the attempt before: "shrink" (the full group could not be placed) or "grow"
    # (capacity came back); None when it does not.
    num_workers: int | None = None
    resize: str | None = None
    # Tasks a standby process took (TensorFlow already imported: raytf/_driver/standby.py), of this attempt's.
    standby_tasks: int = 0
    started: float = field(default_factory=time.time)
    ended: float | None = None
    status: str = RUNNING
    cause: str | None = None
    error_type: str | None = None
    rank: int | None = None
    role: str | None = None
    node_id: str | None = None
    decision: str | None = None
    reason: str | None = None
    # The traceback of raytf's own driver when it is what failed the attempt (failure.DRIVER): a bug to report.
    traceback: str | None = None
    drain: dict[str, Any] | None = None  # a drain's notice and save (cause "drain": Drain.record)
    recycle: dict[str, Any] | None = None  # the memory that grew (cause "recycle": Recycle.record)
    first_step_at: float | None = None
    last_step: int | None = None
    last_commit_at: float | None = None
    recovery_s: float | None = None  # previous attempt's failure -> this attempt's first step
    steps_lost: int | None = None  # steps trained in this attempt beyond what the next one resumes from
    time_lost_s: float | None = None  # training time beyond the last commit (or first step) of this attempt
    # The epoch count at which training is over: train.epochs for a training function; for a script, its current
    # Model.fit's last epoch (unknown without one). Reached by rank 0: a failure after it reruns nothing.
    epoch_target: int | None = None
    training_finished: bool = False

    def observe(self, e: ev.Event, previous: Attempt | None = None) -> str | None:
        """Account one of this attempt's progress events; returns the name of the checkpoint it commits, if any.
        `previous` is the attempt before this one in this launch (its end starts the recovery clock)."""
        if e.attempt != self.number:
            return None
        if e.rank == 0 and e.kind == ev.STARTED and e.payload.epochs is not None:  # a Model.fit began
            self.epoch_target = int(e.payload.base_epoch or 0) + int(e.payload.epochs)
            self.training_finished = False
        if e.rank == 0 and e.kind == ev.EPOCH and self.epoch_target is not None:
            self.training_finished = int(e.payload.epoch) >= self.epoch_target
        if e.kind not in PROGRESS:
            return None
        # Only a step counts as training progress (a script's heartbeats may just be its printing).
        if e.kind in (ev.STEP, ev.EPOCH) and self.first_step_at is None:
            self.first_step_at = e.time
            if previous is not None and previous.ended is not None:
                self.recovery_s = round(e.time - previous.ended, 3)
        # (Step 0: a heartbeat of a program whose steps raytf cannot count, a script without Model.fit or
        # raytf.report: its steps lost stay unknown, not 0. raytf issue 55.)
        if step := int(getattr(e.payload, "step", None) or 0):
            self.last_step = max(self.last_step or 0, step)
        if e.kind == ev.CHECKPOINT:
            self.last_commit_at = e.time
            return checkpoints.checkpoint_name(e.payload.epoch, e.payload.step, int(e.payload.seq))
        return None

    def account_loss(self, resume_step: int) -> None:
        """After a failure: the steps and training time the next attempt, resuming at `resume_step`, redoes."""
        if self.last_step is not None:
            self.steps_lost = max(0, self.last_step - resume_step)
        if self.first_step_at is not None and self.ended is not None:
            self.time_lost_s = round(self.ended - max(self.first_step_at, self.last_commit_at or 0), 3)

    def to_json(self) -> dict[str, Any]:
        out = {k: v for k, v in self.__dict__.items() if k not in ("number", "started", "ended")}
        out.update(attempt=self.number, started_at=self.started, ended_at=self.ended,
                   duration_s=None if self.ended is None else round(self.ended - self.started, 3))
        return out
