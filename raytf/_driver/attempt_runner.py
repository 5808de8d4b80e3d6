"""One attempt, carried out (`AttemptRunner`) in the steps the driver takes it through: its group placed (elastic
training: at the first size that can be: `place`), its tasks started and the attempt loop (_core.attempt_loop)
driven over them, its end concluded into an `AttemptEnd` (the errors that make it, the nodes found unreachable or
lost: `train`), for the run's state machine (_core.run_machine), and always torn down (`teardown`). Imports Ray,
never TensorFlow."""

from __future__ import annotations

import dataclasses
import logging
import math
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ray.exceptions import RayActorError

from raytf._core import elastic, failure, memory, standbys, tf_ports
from raytf._core import events as ev
from raytf._core import timeline as tl
from raytf._core.attempt_drive import drive
from raytf._core.attempt_loop import AttemptLoop, Timing
from raytf._core.attempt_record import Attempt, Done, Drain, Failed, Hung, Interrupted, Stopped
from raytf._core.plan import WORKER, Plan, task_table
from raytf._core.run_machine import Run
from raytf._core.run_states import AttemptEnd, Placing
from raytf._core.topology import TaskAddress
from raytf._driver import figures, nodes, placement, standby
from raytf._driver.data import Datasets
from raytf._driver.dataservice import DataService
from raytf._driver.group import TaskGroup
from raytf._driver.preflight import Launch
from raytf._driver.ray_port import BusUnresponsive, RayPort
from raytf._driver.record import RunRecord
from raytf._driver.sinks import Progress, Sinks
from raytf._driver.usercode import CodePlan
from raytf.config import Config, owns_loop
from raytf.errors import PlacementError, WorkerError

log = logging.getLogger("raytf")

# How often the attempt loop asks Ray which nodes it drains (one GCS call): a notice comes with a deadline of tens of
# seconds at least (a cloud's spot notice: 30 s to 2 min), and a save at an agreed step takes a few.
DRAIN_CHECK_S = 1.0


@dataclass(frozen=True)
class Placement:
    """An attempt's group placed: its size (elastic training: maybe fewer than cluster.num_workers), its plan and
    its placement group."""

    size: int
    plan: Plan
    pg: Any


def driver_error(e: Exception) -> AttemptEnd:
    """An exception of raytf's own code while an attempt ran (a Ray call the driver made that failed, say) as the
    attempt's failure, with its traceback: classified and budgeted by the failure policy like any other (as Ray
    Train's controller does with its own errors), not an end of the run without a retry."""
    error = WorkerError(f"raytf's driver failed: {type(e).__name__}: {e}", role="driver", kind=failure.DRIVER,
                        remote_traceback="".join(traceback.format_exception(type(e), e, e.__traceback__)),
                        error_type=type(e).__name__)
    return AttemptEnd(Failed((error,)), (error,))


class AttemptRunner:
    """Carries out the attempts of one launch; `dispatch` takes the tasks' events (the record, then the sinks)."""

    def __init__(self, launch: Launch, run: Run, record: RunRecord, *, sinks: Sinks, progress: Progress,
                 ray_metrics: Any, dispatch: Callable[[list[ev.Event]], None], data: Datasets | None, code: CodePlan,
                 service: DataService | None = None, poll_s: float = 0.5, one_run: bool = False) -> None:
        self.cfg, self.run_dir, self.run, self.record, self.sinks = launch.cfg, launch.run_dir, run, record, sinks
        self.progress, self.ray_metrics, self.dispatch, self.data = progress, ray_metrics, dispatch, data
        self.embedded, self.code, self.poll_s = bool(launch.embedded), code, poll_s  # code: how tasks get the program
        self.functions = launch.functions  # raytf.fit's train_fn=/eval_fn=, pickled
        self.plan_for = launch.plan_for  # the run's plan at each size, made once
        self.service = service  # the tf.data service (data_service.workers): its servers started per attempt
        self.script = owns_loop(self.cfg)  # its epochs, batch and saves are the program's: a script, a Ray Train loop
        self.group: TaskGroup | None = None  # the last attempt's (the run's end refills its standbys)
        self._refilled: int | None = None  # the attempt whose standbys were asked for
        # When it asks: a session that is this one run (a CLI command) has standbys only for its retries
        # (standbys.refill_after_s).
        self._refill_after_s = standbys.refill_after_s(standby.REFILL_AFTER_S, one_run)
        self._exposed: str | None = None  # the last warning naming the TF ports open to the network
        self._drain_checked = 0.0  # when Ray was last asked for the nodes it drains

    def place(self, placing: Placing) -> Placement:
        """The attempt's group placed at the first of the placing's sizes that can be. Raises PlacementError (no
        size could be placed) and KeyboardInterrupt."""
        size, plan, pg = self._place(placing)
        self.record.timeline.mark(tl.PLACEMENT_READY, time.time())
        return Placement(size, plan, pg)

    def train(self, attempt: Attempt, placed: Placement) -> AttemptEnd:
        """The placed attempt's tasks started, its loop driven to its end, concluded (its group still up:
        `teardown` follows, always). Raises a StorageError, and KeyboardInterrupt (a Ctrl-C outside the loop,
        which decides within it); any other exception of this code's is the attempt's failure (`driver_error`)."""
        self.group = None  # (until this attempt's exists: a failure before it tears down nothing of the last's)
        cfg = elastic.sized(self.cfg, placed.size)
        # The group owns the placement group from here: its teardown releases it even when its tasks never start
        # (the tf.data service failing to start first, say).
        self.group = TaskGroup(cfg, placed.plan, self.run_dir, embedded=self.embedded, code=self.code, pg=placed.pg)
        self.record.metrics.set_size(attempt.number, placed.size)
        self.progress.start_attempt(placed.size, wanted=self.cfg.cluster.num_workers,
                                    min_workers=elastic.min_workers(self.cfg),
                                    batch_size=None if self.script else cfg.train.batch_size)
        return self._train(attempt, cfg, placed.plan, self.group)

    def teardown(self, end: AttemptEnd | None) -> AttemptEnd | None:
        """The attempt's group torn down (its datasets' and the tf.data service's too), whatever happened; for an
        elastic run that failed, whether a node of it is gone now (Ray has had the teardown's time to say)."""
        group = self.group
        try:
            if group is not None:
                group.teardown(skip=set(end.unreachable) if end is not None else set())  # (unreachable: no sweep)
            self.record.timeline.mark(tl.TEARDOWN_DONE, time.time())
        finally:
            if self.data is not None:
                self.data.release()
            if self.service is not None:
                self.service.stop()
        if end is not None and group is not None and not isinstance(end.end, Done | Interrupted) \
                and elastic.is_elastic(self.cfg):
            end = dataclasses.replace(end, node_lost=bool(end.unreachable) or self._node_gone(group))
        return end

    def _train(self, attempt: Attempt, cfg: Config, plan, group: TaskGroup) -> AttemptEnd:
        batch = None if self.script else cfg.train.batch_size
        try:
            if self.service is not None:  # before the trainers: a placement group of its own
                self.service.start(attempt.number)
            mark = self.record.timeline.mark
            group.start()
            mark(tl.ACTORS_STARTED, time.time())
            tasks = group.addresses()
            mark(tl.TASKS_ADDRESSED, time.time())
            served = self.service.wait_ready() if self.service is not None else None
            self.record.placed(plan, tasks)
            attempt.standby_tasks = len(group.adopted)
            if group.adopted:
                log.info("attempt %d: %d of %d tasks start in standby processes (TensorFlow imported already)",
                         attempt.number, len(group.adopted), len(plan.tasks))
            self.ray_metrics.start_attempt(attempt.number, tasks, batch_size=batch)
            log.info("tasks of %s (%s):\n%s", cfg.run.name, cfg.cluster.strategy.value, task_table(tasks, plan.tasks))
            self._warn_exposed(tasks)
            shares = self.data.split(cfg, plan.tasks, group.infos) if self.data is not None else {}
            primary, background = group.launch(attempt=attempt.number, python_path=self.code.python_path,
                                               resume_from=self.run.resumed_from,
                                               max_workers=self.cfg.cluster.num_workers, datasets=shares,
                                               functions=self.functions, data_service=served)
            mark(tl.TASKS_LAUNCHED, time.time())
        except WorkerError as e:
            return AttemptEnd(Failed((e,)), (e,))
        loop = AttemptLoop(
            primary={t.rank: t.role for t in primary.values()},
            background={t.rank: t.role for t in background.values()},
            timing=Timing(hang_timeout_s=cfg.failure.hang_timeout_s, startup_timeout_s=cfg.cluster.startup_timeout_s,
                          interrupt_timeout_s=cfg.checkpoint.interrupt_timeout_s,
                          evaluator_grace_s=cfg.cluster.evaluator.finish_timeout_s),
            attempt=attempt.number, now=time.time(), save_on_interrupt=cfg.checkpoint.on_interrupt,
            can_save_now=not self.script,
            memory=memory.MemoryWatch(self._rss_limits(plan, group), self._recycle_from(attempt)))
        port = RayPort(group, primary, background, poll_s=self.poll_s, service=self.service)
        try:
            drive(loop, port, self.dispatch, poll_s=self.poll_s, on_poll=self._poll,
                  grow=(lambda now: self._grow(now, loop, group)) if elastic.is_elastic(self.cfg) else None,
                  drained=lambda now: self._drained(now, group))
            self.record.timeline.mark(tl.TRAINING_END_SEEN, time.time())
            figures.prefetch()  # (the curves' drawing, at the run's end: its import beside the teardown)
            if not (isinstance(loop.end, Interrupted) and loop.end.at_once):  # (a second Ctrl-C wants out now)
                self.dispatch(port.rest())  # the events still on the bus
        except (RayActorError, BusUnresponsive) as e:  # the bus: the group reads the tasks' own outcomes
            error = WorkerError(f"the run's event bus died: {e}", role="events", kind=failure.SYSTEM)
            return AttemptEnd(Failed((error,)), (error,))
        return self._conclude(loop, port, attempt, group)

    def _rss_limits(self, plan: Plan, group: TaskGroup) -> dict[int, float]:
        """Rank -> the memory (GiB) past which the group is recycled (failure.max_task_rss_gb, _core/memory.py)."""
        reserved = {t.rank: t.memory_bytes / 1024**3 if t.memory_bytes else None for t in plan.tasks}
        limits = memory.rss_limits(self.cfg.failure.max_task_rss_gb, [
            memory.TaskMemory(i.rank, i.node_id, reserved.get(i.rank), i.memory_gib) for i in group.infos])
        if limits:
            values = sorted(set(limits.values()))
            log.info("a task is recycled into a fresh process past %s GiB of memory (failure.max_task_rss_gb%s)",
                     " to ".join(f"{v:g}" for v in values[:: max(1, len(values) - 1)]),
                     "" if self.cfg.failure.max_task_rss_gb is not None else ": unset, from the nodes' memory")
        return limits

    def _recycle_from(self, attempt: Attempt) -> float | None:
        """After a recycle, the next is not before memory.MIN_INTERVAL_S of this attempt (not a slow leak)."""
        before = self.run.attempts[-2] if len(self.run.attempts) > 1 else None
        return attempt.started + memory.MIN_INTERVAL_S if before is not None and before.cause == failure.RECYCLE \
            else None

    def _place(self, placing: Placing):
        """(size, plan, placement group): the first of the placing's sizes that can be placed."""
        cfg = self.cfg
        queue = cfg.cluster.queue_timeout_s
        for i, t in enumerate(placing.tries):
            plan = self.plan_for(t.size)
            last = i == len(placing.tries) - 1  # (elastic training's larger sizes are probed, never queued for)
            try:
                pg = placement.reserve(plan, timeout_s=t.timeout_s, name=f"raytf:{cfg.run.name}",
                                       can_grow=not self.embedded, avoid=set(placing.avoid),
                                       queue_s=0.0 if self.embedded or not last else
                                       math.inf if queue is None else queue)
            except PlacementError:
                if last:
                    raise
                log.warning("%d worker(s) could not be placed within %gs (%s); trying fewer", t.size, t.timeout_s,
                            t.why)
                continue
            return t.size, plan, pg
        raise AssertionError("unreachable: the last size raises")

    def _conclude(self, loop: AttemptLoop, port: RayPort, attempt: Attempt, group: TaskGroup) -> AttemptEnd:
        """The loop's end made into the errors that explain it: the tasks' own (and those of the tasks that
        failed within a second of the first), a hang's (with its stacks), a preemption's or a grow's."""
        end, lost = loop.end, tuple(loop.lost)
        unreachable: frozenset[str] = frozenset()
        if isinstance(end, Done | Interrupted):
            return AttemptEnd(end, lost=lost)
        if isinstance(end, Stopped):
            errors = [end.error(self.cfg.cluster.num_workers, group.node_of,
                                lambda rank: info.role if (info := group.info(rank)) is not None else None)]
        elif isinstance(end, Hung):
            errors = [group.hang_error(rank, attempt.number, end.busy.get(rank)) for rank in end.ranks]
        else:
            more, answered = port.also_failed()
            answered |= {group.node_of(e.rank) for e in end.errors if e.rank not in group.unavailable}
            errors = [*end.errors, *more]
            unreachable = self._unreachable(errors, answered, group)
            self.dispatch(port.rest())
        return AttemptEnd(end, tuple(errors), unreachable, lost=lost)

    @staticmethod
    def _unreachable(errors: list[WorkerError], answered: set[str], group: TaskGroup) -> frozenset[str]:
        """The nodes TF says stopped heartbeating, and that gave no answer: the next attempt avoids them while
        Ray still counts them alive (it takes Ray ~30-60 s to declare a partitioned host dead)."""
        where = {(i.role, i.index): i.node_id for i in group.infos}
        found = failure.unreachable_nodes([f"{e.message}\n{e.remote_traceback}" for e in errors], where, answered)
        if found:
            log.warning("unreachable: node(s) %s (their tasks stopped heartbeating and gave no answer); the next "
                        "attempt avoids them", ", ".join(n[:12] for n in sorted(found)))
        return frozenset(found)

    @staticmethod
    def _node_gone(group: TaskGroup) -> bool:
        """Whether Ray has declared a node of the attempt dead."""
        alive = nodes.alive()
        return any(i.node_id and i.node_id not in alive for i in group.infos)

    def _drained(self, now: float, group: TaskGroup) -> Drain | None:
        """Each round of the attempt loop (at most every DRAIN_CHECK_S): a node of the group's, or of the tf.data
        service's servers, that Ray drains (Drain.first); None when none is."""
        if now - self._drain_checked < DRAIN_CHECK_S:
            return None
        self._drain_checked = now
        ranks: dict[str, list[int]] = {}
        for i in group.infos:
            if i.node_id:
                ranks.setdefault(i.node_id, []).append(i.rank)
        servers = self.service.nodes() if self.service is not None else {}
        draining = nodes.draining() if ranks or servers else {}
        drain = Drain.first(ranks, servers, draining, now)
        if drain is not None and drain.ranks:
            group.refill_off(drain.node, set(draining))  # (while the group saves)
        return drain

    def _grow(self, now: float, loop: AttemptLoop, group: TaskGroup) -> bool | None:
        """Elastic training, each round of the loop: None to keep the size; else how to grow (attempt_drive.drive)."""
        grow = self.run.grow_check(now, len(loop.lost))
        if grow is None or grow.missing == 0:
            return None if grow is None else grow.save_now
        cfg = self.cfg
        missing = [t.bundle for t in self.plan_for(cfg.cluster.num_workers).tasks if t.role == WORKER][: grow.missing]
        spread = cfg.cluster.placement_strategy.value == "STRICT_SPREAD"
        used = {i.node_id for i in group.infos} - {""} if spread else set()
        if not placement.capacity(missing, cfg.cluster.placement_strategy.value, avoid=used):
            return None
        return grow.save_now

    def _poll(self) -> None:
        """Once per round of the attempt loop."""
        self.record.flush_metrics()
        attempt = self.run.attempt
        if (self._refilled != attempt.number and self.group is not None and attempt.first_step_at is not None
                and time.time() - attempt.first_step_at >= self._refill_after_s):
            # Training: a retry from now on starts in standbys (standby.REFILL_AFTER_S says when and at what cost).
            self._refilled = attempt.number
            self.group.refill()
        self.sinks.poll()  # (Ray drops a gauge not set for two export intervals)
        if self.data is not None:
            self.data.waiting(training=attempt.first_step_at is not None)

    def _warn_exposed(self, tasks) -> None:
        """Name the TF servers' host:port pairs anyone on the network can reach: once, and again only if a retry
        moved them."""
        warning = tf_ports.exposure_warning([TaskAddress(i.role, i.index, i.host, i.port) for i in tasks],
                                         strategy=self.cfg.cluster.strategy, port_range=self.cfg.cluster.port_range)
        if warning is not None and warning != self._exposed:
            log.warning("%s", warning)
        self._exposed = warning
