"""The Ray driver: reserve, start the tasks, wire TF_CONFIG, consume events, tear everything down.

Imports Ray, never TensorFlow.
"""

from __future__ import annotations

import copy
import datetime as _dt
import logging
import os
import platform
import secrets
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import ray
from ray.exceptions import RayActorError

from raytf import _storage as storage
from raytf._core import checkpoints, failure, figures
from raytf._core import events as ev
from raytf._core.attempts import FAILED, INTERRUPTED, PROGRESS, RUNNING, SUCCEEDED, Attempt
from raytf._core.metrics import MetricsTable
from raytf._core.plan import EVALUATOR, WORKER, Plan, actor_name, is_server, make_plan, task_table
from raytf._driver import connect
from raytf._driver.group import TaskGroup
from raytf._driver.headwatch import HeadWatch
from raytf._driver.sinks import Progress, TensorBoardSink
from raytf.config import Config, ignored_by_scripts, redacted, script_mode, to_dict, to_yaml, validate
from raytf.errors import RaytfError, TrainingFailedError, WorkerError

log = logging.getLogger("raytf")


@dataclass(frozen=True)
class Outcome:
    """What one launch produced; the API wraps it in the public `raytf.Result` (the driver stays below the
    API: it never imports it)."""

    status: str
    run_dir: str
    config: Config
    summary: dict[str, Any]
    metrics_table: pa.Table
    error: TrainingFailedError | None
    checkpoints: list[str]


def default_run_name(now: _dt.datetime | None = None) -> str:
    now = now or _dt.datetime.now()
    return f"run-{now:%Y%m%d-%H%M%S}-{secrets.token_hex(2)}"


class Driver:
    """Runs one launch of a run: attempts until one succeeds or the failure policy says stop."""

    poll_s = 0.5

    def __init__(self, cfg: Config, *, quiet: bool = False,
                 on_event: Callable[[ev.Event], None] | None = None) -> None:
        cfg = copy.deepcopy(cfg)
        validate(cfg)
        cfg.run.name = cfg.run.name or default_run_name()
        self.cfg = cfg
        self.quiet = quiet
        self.on_event = on_event
        self.run_dir = storage.RunDir(cfg.storage, cfg.run.name)
        self.plan: Plan = make_plan(cfg)
        self.tasks: list[dict[str, Any]] = []
        self.attempts: list[Attempt] = []
        self.previous_attempts: list[dict[str, Any]] = []
        self.resumed_from = None
        self.versions: dict[str, str] = {"ray": ray.__version__, "python": platform.python_version()}
        self.t0 = time.time()
        self.first_step_at: float | None = None
        self.replicas = 0  # num_replicas_in_sync as the tasks' strategy reported it
        self.lost_tasks: list[dict[str, Any]] = []
        self.watched: dict[int, float] = {}  # rank -> last progress (driver clock), for hang detection
        self.committed: set[str] = set()  # checkpoints committed during this launch
        self.preempted: ev.Event | None = None  # a preemption notice not yet acted on
        self.primary: dict = {}  # the current attempt's primary refs (tasks running user code)
        self.stopping = False  # a save-and-stop is under way
        self.error: TrainingFailedError | None = None
        self.suspects: set[str] = set()  # nodes the last failure left unreachable: the next attempt avoids them
        self.head_watch: HeadWatch | None = None
        self._result_lock = threading.Lock()  # result.json is written by the main thread and the head watch

    # -- the run -----------------------------------------------------------------------------
    def run(self) -> Outcome:
        cfg, rd = self.cfg, self.run_dir
        python_path = connect.python_path(cfg)
        connect.check_entrypoint(cfg, python_path)
        rd.makedirs()
        previous_table = None
        if rd.exists(storage.RESULT_FILE):
            self.previous_attempts = list(rd.read_json(storage.RESULT_FILE).get("attempts", []))
        if cfg.checkpoint.resume:
            self.resumed_from = rd.latest_checkpoint()
            if rd.exists(storage.METRICS_FILE):
                previous_table = rd.read_table(storage.METRICS_FILE)
        elif rd.exists(storage.CHECKPOINTS_DIR) and rd.list_checkpoints():
            log.warning("checkpoint.resume=false: starting %s from scratch despite its checkpoints",
                        cfg.run.name)
        ignored = ignored_by_scripts(cfg)
        if ignored:
            log.warning("train.script: %s have no effect on a script (it builds its own strategy, loop and "
                        "checkpoints); set them in the script or its train.args", ", ".join(ignored))
        rd.write_text(storage.CONFIG_FILE, to_yaml(redacted(cfg)))
        self.metrics = MetricsTable(cfg.run.name, previous_table)
        self.tensorboard = TensorBoardSink(rd)
        # A script's epochs, steps and batch size are its own: its first Model.fit tells the first two.
        script = script_mode(cfg)
        self.progress = Progress(epochs=None if script else cfg.train.epochs,
                                 steps_per_epoch=None if script else cfg.train.steps_per_epoch,
                                 batch_size=None if script else cfg.train.batch_size, quiet=self.quiet)
        started = connect.ensure_ray(cfg)
        # Only a Ray this process started is known to be one machine with no autoscaler.
        self.embedded = started or connect.resolve_address(cfg) is None
        status = FAILED
        self._write_result(RUNNING)
        failures = 0
        self.head_watch = None if self.embedded else self._watch_head()
        try:
            while True:
                attempt = Attempt(len(self.previous_attempts) + len(self.attempts) + 1, len(self.attempts) + 1,
                                   resumed_from=self.resumed_from.name if self.resumed_from else None)
                self.attempts.append(attempt)
                if self.resumed_from is not None:
                    log.info("attempt %d: resuming %s from %s", attempt.number, cfg.run.name,
                             self.resumed_from.name)
                try:
                    self._run_attempt(attempt, python_path)
                    attempt.status = status = SUCCEEDED
                    break
                except TrainingFailedError as e:
                    if not self._retry(attempt, e, failures):
                        self.error = e
                        break
                    if attempt.cause != failure.PREEMPTED:
                        failures += 1
                    self._write_metrics()
                    self._write_result(RUNNING)
                finally:
                    attempt.ended = attempt.ended or time.time()
        except KeyboardInterrupt:
            status = INTERRUPTED
            self.attempts[-1].status, self.attempts[-1].cause = INTERRUPTED, "interrupted"
            self.error = TrainingFailedError("interrupted by the user (KeyboardInterrupt)")
            raise
        except RaytfError as e:  # placement and storage errors: recorded, then raised to the caller
            self.error = TrainingFailedError(str(e))
            self.attempts[-1].status, self.attempts[-1].cause = FAILED, type(e).__name__
            raise
        finally:
            if self.head_watch is not None:
                self.head_watch.stop()
            self.progress.close()
            self.tensorboard.close()
            self._write_curves()
            self._write_metrics()
            self._write_result(status)
        return self.outcome(status)

    def _watch_head(self) -> HeadWatch | None:
        try:
            address = ray.get_runtime_context().gcs_address
        except Exception:  # a Ray Client connection (ray://): the client server's address is the head's
            address = connect.resolve_address(self.cfg)
        if not address or ":" not in address:
            return None
        return HeadWatch(address, self._head_lost, lost_after_s=failure.head_lost_after(os.environ)).start()

    def _head_lost(self, why: str) -> None:
        """From the head watch's thread: the cluster is gone, and the main thread may be blocked on it for good
        (Ray itself ends this process a little later). Record the run, say what happened in one line, exit:
        1, or 0 when training had already succeeded and only the teardown was left."""
        attempt = self.attempts[-1] if self.attempts else None
        done = attempt is not None and attempt.status == SUCCEEDED
        latest = self.run_dir.latest_checkpoint()
        resume = f"it resumes from {latest.name}" if latest is not None else "it starts from scratch"
        message = (f"run {self.cfg.run.name} {'succeeded, then' if done else 'failed:'} lost the Ray head at "
                   f"{self.head_watch.address if self.head_watch else '?'} ({why}); a Ray cluster does not "
                   f"outlive its head and its other nodes stop too. Fix: restart the cluster (ray start --head, "
                   f"then the workers) and launch again: {resume}")
        if not done:
            if attempt is not None and attempt.status == RUNNING:
                attempt.status, attempt.cause, attempt.ended = FAILED, failure.HEAD_LOST, time.time()
            self.error = TrainingFailedError(message)
        try:
            self._write_metrics(retry=False)
            self._write_result(SUCCEEDED if done else FAILED, lock_timeout_s=10.0)
        except Exception as e:  # storage too: still say what happened, and go
            log.error("result.json not written: %s", e)
        log.error(message)
        for handler in logging.getLogger().handlers + log.handlers:
            handler.flush()
        sys.stdout.flush()
        sys.stderr.flush()
        # Not an exception: the main thread may sit in a Ray call that never returns without the GCS.
        os._exit(0 if done else 1)

    def _retry(self, attempt: Attempt, error: TrainingFailedError, failures: int) -> bool:
        """Apply the failure policy to a failed attempt; on retry, pick the checkpoint to resume from."""
        attempt.status, attempt.ended = FAILED, time.time()
        verdict = failure.decide(kind=attempt.cause or failure.SYSTEM, error_type=attempt.error_type or "",
                                 attempt=attempt.index, progressed=attempt.first_step_at is not None,
                                 failures_so_far=failures, cfg=self.cfg.failure)
        attempt.decision, attempt.reason = verdict.decision.value, verdict.reason
        latest = self.run_dir.latest_checkpoint()
        if latest is not None and not self.cfg.checkpoint.resume and latest.name not in self.committed:
            latest = None  # checkpoint.resume=false: only this launch's own checkpoints count
        attempt.account_loss(latest.step if latest else 0)
        if verdict.decision is failure.Decision.RAISE:
            log.error("attempt %d failed (%s): %s; not retrying", attempt.number, attempt.cause, verdict.reason)
            return False
        log.warning("attempt %d failed (%s, %s %s): %s; restarting the group from %s", attempt.number,
                    attempt.cause, attempt.role, attempt.rank, verdict.reason, latest.name if latest else "scratch")
        self.resumed_from = latest
        return True

    def _run_attempt(self, attempt: Attempt, python_path: list[str]) -> None:
        cfg = self.cfg
        self.group = group = TaskGroup(cfg, self.plan, self.run_dir, embedded=self.embedded, avoid=self.suspects)
        self.suspects = set()
        try:
            try:
                group.start()
                self.tasks = group.addresses()
                log.info("tasks of %s (%s):\n%s", cfg.run.name, cfg.cluster.strategy.value,
                         task_table(self.tasks, self.plan.tasks))
                primary, background = group.launch(attempt=attempt.number, python_path=python_path,
                                                   resume_from=self.resumed_from)
            except WorkerError as e:
                raise self._fail(attempt, [e]) from None
            self.primary, self.preempted, self.stopping = primary, None, False
            # Watch the ranks running user code; before its first heartbeat a rank gets the start-up allowance.
            self.watched = {t.rank: time.time() + cfg.cluster.startup_timeout_s for t in primary.values()}
            try:
                self._event_loop(primary, background, group.bus, attempt)
            except RayActorError as e:  # only the bus' calls raise it here: the group reads the tasks' outcomes
                raise self._fail(attempt, [WorkerError(f"the run's event bus died: {e}", role="events",
                                                       kind=failure.SYSTEM)]) from None
            except KeyboardInterrupt:
                if cfg.checkpoint.on_interrupt and primary:
                    self._final_save(primary, group.bus, attempt)
                raise
        finally:
            self.watched = {}
            group.teardown()

    def _event_loop(self, primary: dict, background: dict, bus, attempt: Attempt) -> None:
        self._pump(primary, background, bus, attempt, deadline=None)
        # Training is over: release the servers' serve() calls and let the evaluator finish its last round.
        ray.get(bus.request_stop.remote())
        servers = {r: t for r, t in background.items() if t.role != EVALUATOR}
        if servers:  # they return at once, once their logs are saved; training is over either way
            ray.wait(list(servers), num_returns=len(servers), timeout=10)
        evaluators = {r: t for r, t in background.items() if t.role == EVALUATOR}
        if evaluators:
            grace = self.cfg.cluster.evaluator.finish_timeout_s
            if not self._pump(evaluators, {}, bus, attempt, deadline=time.monotonic() + grace):
                log.warning("the evaluator did not finish within cluster.evaluator.finish_timeout_s=%gs; "
                            "stopping it", grace)
        self._dispatch(ray.get(bus.drain.remote(0)))

    def _pump(self, waited: dict, others: dict, bus, attempt: Attempt, deadline: float | None) -> bool:
        """Consume events until every ref in `waited` has finished (True) or the deadline passes (False).
        A failed task fails the attempt, except a lost ParameterServerStrategy worker: the coordinator
        moves its scheduled functions to the other workers. So does a watched rank without progress for
        failure.hang_timeout_s (a hang)."""
        drain = bus.drain.remote(self.poll_s)
        last_flush = time.monotonic()
        while waited:
            if deadline is not None and time.monotonic() > deadline:
                self._dispatch(ray.get(drain))
                return False
            ready, _ = ray.wait([*waited, *others, drain], num_returns=1, timeout=self.poll_s * 4)
            for ref in ready:
                if ref == drain:
                    self._dispatch(ray.get(drain))
                    drain = bus.drain.remote(self.poll_s)
                    if self.preempted is not None and waited is self.primary and not self.stopping:
                        self._dispatch(ray.get(drain))
                        raise self._preemption(attempt, bus)
                    continue
                t = waited.pop(ref) if ref in waited else others.pop(ref)
                self.watched.pop(t.rank, None)
                error = self.group.outcome(ref, t)
                if error is None:
                    continue
                if is_server(self.cfg.cluster.strategy, t.role) and t.role == WORKER and error.kind == failure.SYSTEM:
                    name = actor_name(self.cfg.run.name, t.role, t.rank)
                    # (Unavailable, not dead: it may be a host cut off that Ray has not declared dead yet.)
                    if t.rank not in self.group.unavailable and self.group.node_alive(error.node_id):
                        log.warning("lost %s (%s); the coordinator reschedules its work on the other workers",
                                    name, error.message)
                        self.lost_tasks.append({"role": t.role, "rank": t.rank, "attempt": attempt.number,
                                                "time": time.time(), "cause": error.message})
                        continue
                    # Its host is gone (cut off, or down): TF's ClusterCoordinator waits for the calls in flight
                    # to it with no deadline (a dead process refuses the connection, a lost host never answers,
                    # and TF's gRPC channels have no keepalive), so the chief would wait until
                    # failure.hang_timeout_s. Seen on raytf issue 16's partition test (TF 2.21).
                    log.warning("lost %s with its node; TF's coordinator cannot reschedule what was in flight on "
                                "it: restarting the attempt", name)
                more, answered = self._also_failed({**waited, **others})
                errors = [error, *more]
                if t.rank not in self.group.unavailable:
                    answered.add(self.group.info(t.rank).get("node_id", ""))
                self._suspect_unreachable(errors, answered)
                self._dispatch(ray.get(drain) + ray.get(bus.drain.remote(0)))
                raise self._fail(attempt, errors)
            stale = failure.stale_ranks(self.watched, time.time(), self.cfg.failure.hang_timeout_s)
            if stale:
                self._dispatch(ray.get(drain))
                raise self._fail(attempt, [self.group.hang_error(rank, attempt.number) for rank in stale])
            if self.metrics.dirty and time.monotonic() - last_flush >= self.cfg.metrics.flush_interval_s:
                try:
                    self._write_metrics(retry=False)
                except RaytfError as e:  # storage away for a while: the next flush (or the last) writes it
                    log.warning("metrics.parquet not written this time: %s", e)
                last_flush = time.monotonic()
        # The outstanding drain returns within poll_s; its events must not be lost.
        self._dispatch(ray.get(drain) + ray.get(bus.drain.remote(0)))
        return True

    def _preemption(self, attempt: Attempt, bus) -> TrainingFailedError:
        """A task was given notice: all save at an agreed step and stop; the attempt then ends as a
        preemption, retried from that checkpoint (steps lost: none)."""
        e, self.preempted, self.stopping = self.preempted, None, True
        saved = self.save_and_stop(self.primary, bus, attempt)
        info = self.group.info(e.rank)
        return self._fail(attempt, [WorkerError(
            f"preempted (SIGTERM) at step {e.payload.get('step')}; "
            f"{'saved' if saved else 'could not save'} before stopping",
            role=e.role, rank=e.rank, node_id=info.get("node_id", ""), kind=failure.PREEMPTED)])

    def save_and_stop(self, primary: dict, bus, attempt: Attempt) -> bool:
        """Have every task running user code save at one agreed step and stop (the save-now protocol in
        events.EventBuffer); True when they all stopped within checkpoint.interrupt_timeout_s."""
        if script_mode(self.cfg):
            # A script owns its checkpoints: raytf cannot ask it to save at a step (its last synced one stands).
            log.warning("train.script: no save-at-a-step for scripts; the last synced checkpoint stands")
            return False
        timeout = self.cfg.checkpoint.interrupt_timeout_s
        deadline = time.monotonic() + timeout
        version = ray.get(bus.request_save.remote())
        reports = ray.get(bus.wait_reports.remote(len(primary), timeout))
        if not reports:
            log.warning("save request %d: no task answered in %gs", version, timeout)
            return False
        save_at = max(reports.values()) + 1
        log.warning("every task saves at step %d, then stops", save_at)
        ray.get(bus.decide.remote(save_at, True))
        self.watched = {}  # tasks block while the decision travels: not a hang
        return self._pump(primary, {}, bus, attempt, deadline=deadline)

    def _final_save(self, primary: dict, bus, attempt: Attempt) -> None:
        log.warning("interrupted: saving a final checkpoint (Ctrl-C again to stop at once)")
        try:
            if not self.save_and_stop(primary, bus, attempt):
                log.warning("no final checkpoint within checkpoint.interrupt_timeout_s")
        except KeyboardInterrupt:
            log.warning("second interrupt: tearing down now")
        except TrainingFailedError as e:
            log.warning("final checkpoint failed: %s", e)
        except RayActorError as e:  # the bus is gone: nobody to agree a step with
            log.warning("final checkpoint failed: the run's event bus died: %s", e)

    def _also_failed(self, pending: dict, grace_s: float = 1.0) -> tuple[list[WorkerError], set[str]]:
        """Other tasks failing within `grace_s` of the first (a dead task's peers error out within
        milliseconds, and whichever is seen first, the death is the cause worth reporting), and the nodes
        whose tasks answered at all in that time."""
        ready, _ = ray.wait(list(pending), num_returns=len(pending), timeout=grace_s) if pending else ([], [])
        errors = [e for e in (self.group.outcome(r, pending[r]) for r in ready) if e is not None]
        answered = {self.group.info(pending[r].rank).get("node_id", "") for r in ready
                    if pending[r].rank not in self.group.unavailable}
        return errors, answered

    def _suspect_unreachable(self, errors: list[WorkerError], answered: set[str]) -> None:
        """The nodes TF says stopped heartbeating, and that gave no answer: the next attempt avoids them while
        Ray still counts them alive (it takes Ray ~30-60 s to declare a partitioned host dead)."""
        nodes = {(i["role"], i["index"]): i["node_id"] for i in self.group.infos}
        self.suspects = failure.unreachable_nodes([f"{e.message}\n{e.remote_traceback}" for e in errors], nodes,
                                                  answered)
        if self.suspects:
            log.warning("unreachable: node(s) %s (their tasks stopped heartbeating and gave no answer); the next "
                        "attempt avoids them", ", ".join(n[:12] for n in sorted(self.suspects)))

    def _fail(self, attempt: Attempt, errors: list[WorkerError]) -> TrainingFailedError:
        root = errors[failure.root_cause([e.kind for e in errors])]
        attempt.cause, attempt.error_type = root.kind, root.error_type
        attempt.rank, attempt.role, attempt.node_id = root.rank, root.role, root.node_id
        level = logging.WARNING if root.kind == failure.PREEMPTED else logging.ERROR
        log.log(level, "attempt %d: %s failed: %s", attempt.number, root.role or "run", root)
        if root.remote_traceback and root.remote_traceback.splitlines()[-1] not in root.message:
            log.error("remote traceback (%s %d):\n%s", root.role, root.rank, root.remote_traceback)
        return TrainingFailedError(f"run {self.cfg.run.name} failed: {root}",
                                   {(e.role, e.rank): e for e in sorted(errors, key=lambda e: e is not root)})

    def _dispatch(self, events: list[ev.Event]) -> None:
        attempt = self.attempts[-1]
        now = time.time()
        previous = self.attempts[-2] if len(self.attempts) > 1 else None
        for e in events:
            if e.kind in PROGRESS and e.attempt == attempt.number and e.rank in self.watched:
                self.watched[e.rank] = now  # any progress, heartbeats included, clears a rank of hanging
            committed = attempt.observe(e, previous)
            if committed is not None:
                self.committed.add(committed)
            if e.kind == ev.PREEMPTED and e.attempt == attempt.number and self.preempted is None:
                log.warning("%s %d got a preemption notice (SIGTERM)", e.role, e.rank)
                self.preempted = e
            if e.kind in (ev.STEP, ev.EPOCH) and self.first_step_at is None:
                self.first_step_at = e.time
            if e.kind == ev.STARTED:
                self.replicas = max(self.replicas, int(e.payload.get("replicas", 0)))
                for k in ("tensorflow", "keras"):
                    if k in e.payload:
                        self.versions[k] = e.payload[k]
            self.metrics.add(e)
            self.progress(e)
            self.tensorboard(e)
            if self.on_event is not None:
                self.on_event(e)

    # -- outputs -----------------------------------------------------------------------------
    def _write_curves(self) -> None:
        """learning_curves.png in the run directory (a plot must never fail a run)."""
        try:
            curves = figures.learning_curves(self.metrics.to_arrow())
            if not curves.empty:
                self.run_dir.write_bytes(figures.CURVES_FILE, figures.png_bytes(curves, title=self.cfg.run.name))
        except (RaytfError, OSError, ValueError) as e:
            log.warning("learning curves not plotted: %s", e)

    def _write_metrics(self, retry: bool = True) -> None:
        if self.metrics.rows:
            self.run_dir.write_table(storage.METRICS_FILE, self.metrics.to_arrow(), retry=retry)

    def _checkpoint_uris(self) -> list[str]:
        return [self.run_dir.uri_of(storage.CHECKPOINTS_DIR, e.name)
                for e in self.run_dir.list_checkpoints() if e.committed]

    def summary(self, status: str) -> dict[str, Any]:
        ckpts = self._checkpoint_uris()
        now = time.time()
        return {
            "run": self.cfg.run.name,
            "run_dir": self.run_dir.uri,
            "status": status,
            "strategy": self.cfg.cluster.strategy.value,
            "num_replicas_in_sync": self.replicas,
            "tasks": [{k: i[k] for k in ("role", "index", "rank", "node_id", "host", "port", "gpu_ids",
                                         "cuda_visible_devices")}
                      | {"address": f"{i['host']}:{i['port']}"} for i in self.tasks],
            "attempts": self.previous_attempts + [a.to_json() for a in self.attempts],
            "roles": {role: sum(1 for t in self.plan.tasks if t.role == role)
                      for role in dict.fromkeys(t.role for t in self.plan.tasks)},
            "lost_tasks": self.lost_tasks,
            "resumed_from": (self.run_dir.uri_of(storage.CHECKPOINTS_DIR, self.resumed_from.name)
                             if self.resumed_from else None),
            "final_metrics": self.metrics.final(),
            "last_checkpoint": ckpts[-1] if ckpts else None,
            "model": (self.run_dir.uri_of(storage.MODEL_DIR)
                      if self.run_dir.exists(f"{storage.MODEL_DIR}/{checkpoints.COMMIT_MARKER}") else None),
            "checkpoints": ckpts,
            "versions": self.versions,
            "error": None if self.error is None else self.error.to_json(),
            "started_at": self.t0,
            "ended_at": None if status == RUNNING else now,
            "duration_s": round(now - self.t0, 3),
            "first_step_s": None if self.first_step_at is None else round(self.first_step_at - self.t0, 3),
            "config": to_dict(redacted(self.cfg)),
        }

    def _write_result(self, status: str, lock_timeout_s: float = -1) -> None:
        locked = self._result_lock.acquire(timeout=lock_timeout_s)
        try:  # (a holder stuck on storage for lock_timeout_s: written anyway)
            self.run_dir.write_json(storage.RESULT_FILE, self.summary(status))
        finally:
            if locked:
                self._result_lock.release()

    def outcome(self, status: str) -> Outcome:
        summary = self.run_dir.read_json(storage.RESULT_FILE)
        return Outcome(status=status, run_dir=self.run_dir.uri, config=self.cfg, summary=summary,
                       metrics_table=self.metrics.to_arrow(), error=self.error,
                       checkpoints=summary["checkpoints"])


def run(cfg: Config, *, quiet: bool = False, on_event: Callable[[ev.Event], None] | None = None) -> Outcome:
    """Run `cfg` to completion; failures come back as status "failed" with `error` set.
    `on_event` is called in the driver with every event the tasks send (metrics, checkpoints, ...)."""
    return Driver(cfg, quiet=quiet, on_event=on_event).run()
