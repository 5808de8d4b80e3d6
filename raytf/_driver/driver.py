"""The Ray driver: one launch's attempts. Each reserves and starts the task group, runs the attempt loop
(_core.runloop over _driver.port), concludes (done, or a failure for the policy) and tears everything down.
What the launch writes is _driver.record's.

Imports Ray, never TensorFlow.
"""

from __future__ import annotations

import copy
import datetime as _dt
import logging
import os
import platform
import secrets
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

import ray
from ray.exceptions import RayActorError

from raytf import _storage as storage
from raytf._core import elastic, failure, ports
from raytf._core import events as ev
from raytf._core.attempts import FAILED, INTERRUPTED, RUNNING, SUCCEEDED, Attempt
from raytf._core.function import Functions, configured
from raytf._core.metrics import MetricsTable
from raytf._core.plan import WORKER, Plan, make_plan, task_table
from raytf._core.runloop import AttemptLoop, Phase, Timing, drive
from raytf._core.stragglers import Stragglers
from raytf._core.topology import TaskAddress
from raytf._driver import connect, placement, standby, tracking, usercode
from raytf._driver.data import Datasets
from raytf._driver.dataservice import DataService
from raytf._driver.group import TaskGroup
from raytf._driver.headwatch import HeadWatch
from raytf._driver.port import BusUnresponsive, RayPort
from raytf._driver.raymetrics import RayMetrics
from raytf._driver.record import Outcome, RunRecord
from raytf._driver.sinks import Progress, TensorBoardSink
from raytf._s3 import plain_http_endpoint
from raytf.config import (
    Config,
    ignored_by_scripts,
    owns_loop,
    redacted,
    script_mode,
    secret_runtime_env,
    to_yaml,
    validate,
    validate_run,
)
from raytf.errors import ConfigError, PlacementError, RaytfError, TrainingFailedError, WorkerError

log = logging.getLogger("raytf")

# Elastic training: how long each size between the full one and the smallest is given to be placed.
ELASTIC_PROBE_S = 3.0


def default_run_name(now: _dt.datetime | None = None) -> str:
    now = now or _dt.datetime.now()
    return f"run-{now:%Y%m%d-%H%M%S}-{secrets.token_hex(2)}"


class Driver(RunRecord):
    """Runs one launch of a run: attempts until one succeeds or the failure policy says stop."""

    poll_s = 0.5

    def __init__(self, cfg: Config, *, quiet: bool = False, on_event: Callable[[ev.Event], None] | None = None,
                 datasets: Mapping[str, Any] | None = None, functions: Functions | None = None) -> None:
        self.functions = functions or Functions()  # raytf.fit's train_fn=/eval_fn=, pickled (_driver.functions)
        cfg = configured(copy.deepcopy(cfg), self.functions)  # train.entrypoint records them
        validate_run(validate(cfg))  # before anything starts: storage keys would travel to every task
        cfg.run.name = cfg.run.name or default_run_name()
        self.cfg = cfg
        self.quiet = quiet
        self.on_event = on_event
        self._given_datasets = datasets  # raytf.fit's datasets=; checked once Ray is up (see run)
        self.data: Datasets | None = None
        self.service: DataService | None = None  # the tf.data service (data_service.workers), its servers per attempt
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
        # Ranks slower than the others (metrics.straggler_ratio), this launch's; earlier launches' from result.json.
        self.stragglers = Stragglers(cfg.metrics.straggler_ratio, cfg.metrics.straggler_window)
        self.previous_stragglers: list[dict[str, Any]] = []
        self._hosts: dict[int, str] = {}  # rank -> host, of the attempt under way
        self._refilled: int | None = None  # the attempt whose standbys were asked for
        self.group: TaskGroup | None = None
        self.code: usercode.CodePlan | None = None  # how the tasks get the program (set once connected)
        self.committed: set[str] = set()  # checkpoints committed during this launch
        self._verified: set[str] = set()  # checkpoints whose files this launch checked against their manifest
        self._refused: set[str] = set()  # and those that did not match (named once)
        self._last_flush = time.monotonic()  # the last metrics part's write
        self._launch_id = f"{int(self.t0)}-{secrets.token_hex(3)}"
        self._parts_written = 0
        self.error: TrainingFailedError | None = None
        self.suspects: set[str] = set()  # nodes the last failure left unreachable: the next attempt avoids them
        self.head_watch: HeadWatch | None = None
        self._exposed: str | None = None  # the last warning naming the TF ports open to the network
        # Elastic training: the size of the group last placed, resizes so far, failures counted so far, the last
        # look for the capacity of the missing workers.
        self.size = cfg.cluster.num_workers
        self.resizes = 0
        self.failures = 0
        self._grow_checked = 0.0
        self._loop: AttemptLoop | None = None  # the attempt loop under way (its tolerated PS worker losses)
        self._result_lock = threading.Lock()  # result.json is written by the main thread and the head watch
        self.previous_mlflow_run_id: str | None = None
        self.tracking = tracking.for_run(cfg)  # (MLflow missing: a ConfigError now, before anything starts)

    # -- the run -----------------------------------------------------------------------------
    def run(self) -> Outcome:
        cfg, rd = self.cfg, self.run_dir
        python_path = connect.python_path(cfg)
        connect.check_entrypoint(cfg, python_path, self.functions)
        rd.makedirs()
        previous_table = None
        if rd.exists(storage.RESULT_FILE):
            before = rd.read_json(storage.RESULT_FILE)
            self.previous_attempts = list(before.get("attempts", []))
            self.previous_stragglers = list(before.get("stragglers") or [])
            self.previous_mlflow_run_id = before.get("mlflow_run_id")
        if cfg.checkpoint.resume:
            self.resumed_from = self._trusted_checkpoint()
            if rd.has_metrics():
                previous_table = rd.read_metrics()
        elif rd.exists(storage.CHECKPOINTS_DIR) and (old := rd.list_checkpoints()):
            # One lineage per run directory: a second one there would be pruned by (epoch, step) against the
            # first, resumed from the first's newest on a retry and reported as the first's last checkpoint.
            raise ConfigError(
                f"checkpoint.resume=false: run.name={cfg.run.name!r} already has {len(old)} checkpoint(s) in "
                f"{rd.uri_of(storage.CHECKPOINTS_DIR)}. Fix: a new run.name for a fresh start, "
                "checkpoint.resume=true to continue it, or delete that directory")
        if (endpoint := plain_http_endpoint(cfg.storage)) is not None:
            log.warning("storage: plain HTTP to %s, not this machine: checkpoints and signed requests cross the "
                        "network unencrypted. Fix: storage.scheme=https (or keep that endpoint on loopback)", endpoint)
        if public := secret_runtime_env(cfg.ray.runtime_env):  # names only, never values
            log.warning("ray.runtime_env: %s look like secrets: runtime_env values are readable by anyone who can "
                        "reach the cluster (Ray's state API) and are written to Ray's logs. Fix: set them in the "
                        "nodes' environment or in files on the nodes instead", ", ".join(public))
        ignored = ignored_by_scripts(cfg)
        if ignored:
            log.warning("train.script: %s have no effect on a script (it builds its own strategy, loop and "
                        "checkpoints); set them in the script or its train.args", ", ".join(ignored))
        rd.write_text(storage.CONFIG_FILE, to_yaml(redacted(cfg)))
        self.metrics = MetricsTable(cfg.run.name, previous_table)
        self.tensorboard = TensorBoardSink(rd)
        self.ray_metrics = RayMetrics(cfg.run.name, enabled=cfg.metrics.ray_metrics)
        # A script's epochs, steps and batch size are its own: its first Model.fit tells the first two (a Ray Train
        # loop's too: its reports count its epochs).
        script = owns_loop(cfg)
        self.progress = Progress(epochs=None if script else cfg.train.epochs,
                                 steps_per_epoch=None if script else cfg.train.steps_per_epoch,
                                 batch_size=None if script else cfg.train.batch_size, quiet=self.quiet)
        started = connect.ensure_ray(cfg)
        # Only a Ray this process started is known to be one machine with no autoscaler (a notebook's
        # ray.init(address=<cluster>) before raytf.fit, with no ray.address in the config, is a cluster).
        self.embedded = started or connect.started_here()
        try:  # Ray Data input: made (train.datasets' function needs Ray) and checked before anything is reserved
            self.code = usercode.plan(cfg, embedded=self.embedded)
            if cfg.train.script:  # as the tasks take it (from their own copy of a working_dir, say)
                cfg.train.script = self.code.script
            self.data = Datasets.of_run(cfg, self._given_datasets, python_path)
            if self.data is not None:
                self.data.check(cfg, self.plan, embedded=self.embedded)
            if cfg.data_service.workers:
                DataService.check(cfg, self.plan, embedded=self.embedded)
                self.service = DataService(cfg, rd, embedded=self.embedded)
        except BaseException:
            self._close_sinks()
            raise
        status = FAILED
        self.tracking.start(rd, started_at=self.t0)
        self._write_result(RUNNING)
        ended_by: BaseException | None = None
        self.head_watch = None if self.embedded else self._watch_head()
        try:
            while True:
                attempt = Attempt(len(self.previous_attempts) + len(self.attempts) + 1, len(self.attempts) + 1,
                                   resumed_from=self.resumed_from.name if self.resumed_from else None,
                                   epoch_target=None if script else cfg.train.epochs)
                self.attempts.append(attempt)
                if self.resumed_from is not None:
                    log.info("attempt %d: resuming %s from %s", attempt.number, cfg.run.name,
                             self.resumed_from.name)
                try:
                    self._run_attempt(attempt, self.code.python_path)
                    attempt.status = status = SUCCEEDED
                    break
                except TrainingFailedError as e:
                    if not self._retry(attempt, e):
                        self.error = e
                        break
                    self._write_metrics()  # metrics.parquet whole at each attempt's end: rare, and fresh
                    self._write_result(RUNNING)
                finally:
                    attempt.ended = attempt.ended or time.time()
                    self.tracking.attempt_ended(attempt.to_json())
        except KeyboardInterrupt as e:
            ended_by = e
            status = INTERRUPTED
            self.attempts[-1].status, self.attempts[-1].cause = INTERRUPTED, "interrupted"
            self.error = TrainingFailedError("interrupted by the user (KeyboardInterrupt)")
            raise
        except RaytfError as e:  # placement and storage errors: recorded, then raised to the caller
            ended_by = e
            self.error = TrainingFailedError(str(e))
            self.attempts[-1].status, self.attempts[-1].cause = FAILED, type(e).__name__
            raise
        except BaseException as e:
            ended_by = e
            if self.attempts and self.attempts[-1].status == RUNNING:  # (no attempt is left "running" in result.json)
                self.attempts[-1].status, self.attempts[-1].cause = FAILED, type(e).__name__
                self.error = TrainingFailedError(f"{type(e).__name__}: {e}")
            raise
        finally:
            if self.head_watch is not None:
                self.head_watch.stop()
            if standby.refill_at_end and self.group is not None:
                self.group.refill()  # for the session's next run (a notebook's, a sweep's next trial)
            self._record_end(status, ended_by, closing=self._sinks_closing())
        return self.outcome(status)

    def _sinks_closing(self) -> tuple:
        return self.progress.close, self.tensorboard.close, self.ray_metrics.close

    def _close_sinks(self) -> None:
        for close in self._sinks_closing():
            close()

    def _watch_head(self) -> HeadWatch | None:
        try:
            address = ray.get_runtime_context().gcs_address
        except Exception:  # a Ray Client connection (ray://): the client server's address is the head's
            address = connect.resolve_address(self.cfg)
        if not address or ":" not in address:
            return None
        return HeadWatch(address, self._head_lost, lost_after_s=failure.head_lost_after(os.environ)).start()

    def _retry(self, attempt: Attempt, error: TrainingFailedError) -> bool:
        """Apply the failure policy to a failed attempt; on retry, pick the checkpoint to resume from."""
        attempt.status, attempt.ended = FAILED, time.time()
        verdict = failure.decide(kind=attempt.cause or failure.SYSTEM, error_type=attempt.error_type or "",
                                 attempt=attempt.index, progressed=attempt.first_step_at is not None,
                                 failures_so_far=self.failures, cfg=self.cfg.failure,
                                 trained=attempt.training_finished, script=script_mode(self.cfg))
        if self._lost_capacity(attempt) and not attempt.training_finished:
            # Elastic training: a node lost is a capacity change, not an error of the program: the group restarts
            # with the workers that can be placed, bounded by cluster.elastic.max_resizes, not failure.max_failures.
            verdict = failure.Verdict(failure.Decision.RETRY, "a lost node (elastic: the group restarts with the "
                                                              "workers that can be placed)")
        elif verdict.decision is failure.Decision.RETRY and attempt.cause not in (failure.PREEMPTED,
                                                                                   failure.RESIZE):
            self.failures += 1
        attempt.decision, attempt.reason = verdict.decision.value, verdict.reason
        # (With checkpoint.resume=false the run directory had no checkpoints: any here are this launch's.)
        latest = self.run_dir.latest_checkpoint()
        attempt.account_loss(latest.step if latest else 0)
        if verdict.decision is failure.Decision.RAISE:
            log.error("attempt %d failed (%s): %s; not retrying", attempt.number, attempt.cause, verdict.reason)
            return False
        if attempt.cause == failure.RESIZE:  # (the grow's own line said why)
            self.resumed_from = self._trusted_checkpoint()
            return True
        log.warning("attempt %d failed (%s, %s %s): %s; restarting the group from %s", attempt.number,
                    attempt.cause, attempt.role, attempt.rank, verdict.reason, latest.name if latest else "scratch")
        self.resumed_from = self._trusted_checkpoint()
        return True

    def _lost_capacity(self, attempt: Attempt) -> bool:
        """Elastic training, with a resize left: the failed attempt lost a node (Ray declared it dead, or its
        tasks stopped answering: suspects)."""
        if not elastic.is_elastic(self.cfg) or not elastic.may_resize(self.resizes, self.cfg):
            return False
        if self.suspects:
            return True
        alive = {n["NodeID"] for n in ray.nodes() if n.get("Alive")}
        return any(i.get("node_id") and i["node_id"] not in alive for i in self.group.infos)

    def _trusted_checkpoint(self):
        """The checkpoint to resume from: the newest committed one whose files match its manifest. Each one
        refused is named once, on one line; refusing the only ones there are ends the run (starting over would
        silently throw away their training)."""
        entry, refused = self.run_dir.trusted_checkpoint(self._verified)
        for bad, why in refused:
            if bad.dir in self._refused:
                continue
            self._refused.add(bad.dir)
            instead = f"resuming from {entry.name} instead" if entry else "no earlier committed checkpoint to use"
            log.warning("checkpoint %s refused: %s; %s", self.run_dir.uri_of(storage.CHECKPOINTS_DIR, bad.dir), why,
                        instead)
        if entry is None and refused:
            bad, why = refused[0]
            raise ConfigError(
                f"checkpoint {self.run_dir.uri_of(storage.CHECKPOINTS_DIR, bad.dir)} refused: {why}. No earlier "
                "committed checkpoint matches its manifest. Fix: restore its files, or delete it (or the run's "
                "checkpoints/) to train from scratch, or use a new run.name")
        return entry

    def _warn_exposed(self) -> None:
        """Name the TF servers' host:port pairs anyone on the network can reach: once, and again only if a retry
        moved them."""
        warning = ports.exposure_warning(
            [TaskAddress(i["role"], i["index"], i["host"], i["port"]) for i in self.tasks],
            strategy=self.cfg.cluster.strategy, port_range=self.cfg.cluster.port_range)
        if warning is not None and warning != self._exposed:
            log.warning("%s", warning)
        self._exposed = warning

    def _place(self, attempt: Attempt):
        """Elastic training: the size of the next group and its placement group. The full size is waited for up
        to cluster.elastic.wait_s, then each smaller one (down to cluster.min_workers) is tried briefly, and the
        smallest up to cluster.placement_timeout_s (failing with what is missing). Past
        cluster.elastic.max_resizes only the current size is tried."""
        cfg = self.cfg
        sizes = elastic.sizes(cfg)
        if attempt.index == 1 and sizes.skipped:
            log.warning("cluster.elastic.keep_global_batch: %s worker(s) skipped: the global batch (%d x %d) does "
                        "not divide among them", ", ".join(map(str, sizes.skipped)), cfg.train.batch_size,
                        cfg.cluster.num_workers)
        tried = list(sizes.tried) if elastic.may_resize(self.resizes, cfg) else [self.size]
        for i, n in enumerate(tried):
            last = i == len(tried) - 1
            timeout = cfg.cluster.placement_timeout_s if last else cfg.cluster.elastic.wait_s if i == 0 \
                else ELASTIC_PROBE_S
            plan = make_plan(elastic.sized(cfg, n))
            try:
                pg = placement.reserve(plan, timeout_s=timeout, name=f"raytf:{cfg.run.name}",
                                       can_grow=not self.embedded, avoid=self.suspects)
            except PlacementError:
                if last:
                    raise
                log.warning("%d worker(s) could not be placed within %gs (%s); trying fewer", n, timeout,
                            "cluster.elastic.wait_s" if i == 0 else "elastic training's probe of a smaller size")
                continue
            return n, plan, pg
        raise AssertionError("unreachable: the last size raises")

    def _grow_check(self, now: float) -> bool | None:
        """While the group is smaller than cluster.num_workers: every cluster.elastic.grow_check_s, whether the
        missing workers' capacity is there. None to keep the size; else how to grow (see runloop.drive)."""
        cfg = self.cfg
        # ParameterServerStrategy workers the coordinator went on without (their process died, their host is up):
        # the group is smaller by them, while their bundles stay reserved in its placement group.
        tolerated = len(self._loop.lost) if self._loop is not None else 0
        if self.size - tolerated >= cfg.cluster.num_workers or not elastic.may_resize(self.resizes, cfg):
            return None
        if now - self._grow_checked < cfg.cluster.elastic.grow_check_s:
            return None
        self._grow_checked = now
        if tolerated and self.size >= cfg.cluster.num_workers:
            self.size -= tolerated  # (so the restart at full size is recorded as a grow)
            return False  # a ParameterServerStrategy chief saves on its own schedule: at its next checkpoint
        full = make_plan(cfg)
        missing = [t.bundle for t in full.tasks if t.role == WORKER][: cfg.cluster.num_workers - self.size]
        spread = cfg.cluster.placement_strategy.value == "STRICT_SPREAD"
        used = {i.get("node_id", "") for i in self.group.infos} - {""} if spread else set()
        if not placement.capacity(missing, cfg.cluster.placement_strategy.value, avoid=used):
            return None
        return elastic.grows_by_saving_now(cfg, owns_loop(cfg))

    def _run_attempt(self, attempt: Attempt, python_path: list[str]) -> None:
        cfg = self.cfg
        pg = None
        if elastic.is_elastic(cfg):
            before = self.size
            self.size, self.plan, pg = self._place(attempt)
            cfg = elastic.sized(cfg, self.size)
            if self.size != before:
                attempt.resize = elastic.GROW if self.size > before else elastic.SHRINK
                self.resizes += 1
                log.warning("attempt %d: %d of %d workers (%s)", attempt.number, self.size,
                            self.cfg.cluster.num_workers, attempt.resize)
            self._grow_checked = time.time()
        attempt.num_workers = self.size
        self.metrics.set_size(attempt.number, self.size)
        self.progress.start_attempt(self.size, wanted=self.cfg.cluster.num_workers,
                                    min_workers=elastic.min_workers(self.cfg),
                                    batch_size=None if owns_loop(self.cfg) else cfg.train.batch_size)
        self.group = group = TaskGroup(cfg, self.plan, self.run_dir, embedded=self.embedded, avoid=self.suspects,
                                       code=self.code)
        self.suspects = set()
        try:
            try:
                if self.service is not None:  # before the trainers: a placement group of its own
                    self.service.start(attempt.number)
                group.start(pg)
                self.tasks = group.addresses()
                served = self.service.wait_ready() if self.service is not None else None
                attempt.standby_tasks = len(group.adopted)
                if group.adopted:
                    log.info("attempt %d: %d of %d tasks start in standby processes (TensorFlow imported already)",
                             attempt.number, len(group.adopted), len(self.plan.tasks))
                self._hosts = {t["rank"]: t["host"] for t in self.tasks}
                self.ray_metrics.start_attempt(attempt.number, self.tasks,
                                               batch_size=None if owns_loop(cfg) else cfg.train.batch_size)
                log.info("tasks of %s (%s):\n%s", cfg.run.name, cfg.cluster.strategy.value,
                         task_table(self.tasks, self.plan.tasks))
                self._warn_exposed()
                shares = self.data.split(cfg, self.plan.tasks, group.infos) if self.data is not None else {}
                primary, background = group.launch(attempt=attempt.number, python_path=python_path,
                                                   resume_from=self.resumed_from,
                                                   max_workers=self.cfg.cluster.num_workers, datasets=shares,
                                                   functions=self.functions, data_service=served)
            except WorkerError as e:
                raise self._fail(attempt, [e]) from None
            loop = AttemptLoop(
                primary={t.rank: t.role for t in primary.values()},
                background={t.rank: t.role for t in background.values()},
                timing=Timing(hang_timeout_s=cfg.failure.hang_timeout_s,
                              startup_timeout_s=cfg.cluster.startup_timeout_s,
                              interrupt_timeout_s=cfg.checkpoint.interrupt_timeout_s,
                              evaluator_grace_s=cfg.cluster.evaluator.finish_timeout_s),
                attempt=attempt.number, now=time.time(), save_on_interrupt=cfg.checkpoint.on_interrupt,
                can_save_now=not owns_loop(cfg))
            self._loop = loop
            port = RayPort(group, primary, background, poll_s=self.poll_s)
            try:
                drive(loop, port, self._dispatch, poll_s=self.poll_s, on_poll=self._poll,
                      grow=self._grow_check if elastic.is_elastic(self.cfg) else None)
                if not loop.at_once:  # the events still on the bus (a second Ctrl-C wants out now)
                    self._dispatch(port.rest())
            except (RayActorError, BusUnresponsive) as e:  # the bus: the group reads the tasks' own outcomes
                raise self._fail(attempt, [WorkerError(f"the run's event bus died: {e}", role="events",
                                                       kind=failure.SYSTEM)]) from None
            self._conclude(loop, port, attempt)
            attempt.status = SUCCEEDED  # trained: a head lost during the teardown does not undo that
        finally:
            group.teardown(skip=self.suspects)  # (their scratch sweep would wait on unreachable nodes)
            if self.data is not None:
                self.data.release()
            if self.service is not None:
                self.service.stop()

    def _conclude(self, loop: AttemptLoop, port: RayPort, attempt: Attempt) -> None:
        """Turn the loop's end into the attempt's: return (done), raise TrainingFailedError (retried or not by
        the policy) or KeyboardInterrupt (the user's, after the final save)."""
        for rank, error, at in loop.lost:
            self.lost_tasks.append({"role": error.role, "rank": rank, "attempt": attempt.number, "time": at,
                                    "cause": error.message})
        if loop.phase is Phase.DONE:
            return
        if loop.phase is Phase.INTERRUPTED:
            raise KeyboardInterrupt
        if loop.cause == failure.RESIZE:
            raise self._fail(attempt, [WorkerError(
                f"capacity for {self.cfg.cluster.num_workers} workers is back: restarting at full size from "
                f"{'a save at an agreed step' if loop.saved else 'the latest checkpoint'}", role="group",
                kind=failure.RESIZE)])
        if loop.cause == failure.PREEMPTED and loop.notice is not None:
            e = loop.notice
            raise self._fail(attempt, [WorkerError(
                f"preempted (SIGTERM) at step {e.payload.get('step')}; "
                f"{'saved' if loop.saved else 'could not save'} before stopping",
                role=e.role, rank=e.rank, node_id=self.group.info(e.rank).get("node_id", ""),
                kind=failure.PREEMPTED)])
        if loop.hung:
            raise self._fail(attempt, [self.group.hang_error(rank, attempt.number, loop.busy.get(rank, (None,))[0])
                                       for rank in loop.hung])
        more, answered = port.also_failed()
        answered |= {self.group.info(e.rank).get("node_id", "") for e in loop.errors
                     if e.rank not in self.group.unavailable}
        errors = [*loop.errors, *more]
        self._suspect_unreachable(errors, answered)
        self._dispatch(port.rest())
        raise self._fail(attempt, errors)

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
        level = logging.WARNING if root.kind in (failure.PREEMPTED, failure.RESIZE) else logging.ERROR
        log.log(level, "attempt %d: %s failed: %s", attempt.number, root.role or "run", root)
        if (root.remote_traceback and root.kind != failure.CONFIG  # (a config error's line says all)
                and root.remote_traceback.splitlines()[-1] not in root.message):
            log.error("remote traceback (%s %d):\n%s", root.role, root.rank, root.remote_traceback)
        return TrainingFailedError(f"run {self.cfg.run.name} failed: {root}",
                                   {(e.role, e.rank): e for e in sorted(errors, key=lambda e: e is not root)})

    def _poll(self) -> None:
        """Once per round of the attempt loop."""
        self._flush_metrics()
        attempt = self.attempts[-1]
        if self.service is not None and (lost := self.service.poll()) is not None:
            raise self._fail(attempt, [lost])  # a server that cannot be started again: the normal retry path
        if (self._refilled != attempt.number and self.group is not None and attempt.first_step_at is not None
                and time.time() - attempt.first_step_at >= standby.REFILL_AFTER_S):
            # Trained long enough to be worth a faster retry (standby.REFILL_AFTER_S says why not sooner).
            self._refilled = attempt.number
            self.group.refill()
        self.ray_metrics.poll()  # (Ray drops a gauge not set for two export intervals)

    def _straggler_watch(self, e: ev.Event) -> None:
        for found in self.stragglers.add(attempt=e.attempt, rank=e.rank, role=e.role, host=self._hosts.get(e.rank, ""),
                                         step=int(e.payload["step"]), metrics=e.payload.get("metrics") or {}):
            if found.over:
                log.info("straggler: %s %d is no longer slow (%s, found at step %d)", found.role, found.rank,
                         found.part, found.step)
            else:
                log.warning(found.line(self.cfg.metrics.straggler_ratio))

    def _dispatch(self, events: list[ev.Event]) -> None:
        attempt = self.attempts[-1]
        previous = self.attempts[-2] if len(self.attempts) > 1 else None
        for e in events:
            committed = attempt.observe(e, previous)
            if committed is not None:
                self.committed.add(committed)
            if e.kind in (ev.STEP, ev.EPOCH) and self.first_step_at is None:
                self.first_step_at = e.time
            if e.kind == ev.STARTED:
                self.replicas = max(self.replicas, int(e.payload.get("replicas", 0)))
                for k in ("tensorflow", "keras"):
                    if k in e.payload:
                        self.versions[k] = e.payload[k]
            self.metrics.add(e)
            if self.service is not None:
                self.service.observe(e)
            if e.kind == ev.STEP:
                self._straggler_watch(e)
            self.progress(e)
            self.tensorboard(e)
            self.ray_metrics(e)
            if self.on_event is not None:
                self.on_event(e)
        self.tracking.on_events(events)

def run(cfg: Config, *, quiet: bool = False, on_event: Callable[[ev.Event], None] | None = None,
        datasets: Mapping[str, Any] | None = None, functions: Functions | None = None) -> Outcome:
    """Run `cfg` to completion; failures come back as status "failed" with `error` set.
    `on_event` is called in the driver with every event the tasks send (metrics, checkpoints, ...); `datasets`:
    {name: ray.data.Dataset} each worker reads its share of (ctx.dataset); `functions`: the training (and
    evaluation) function given as values, pickled, in place of train.entrypoint's import."""
    return Driver(cfg, quiet=quiet, on_event=on_event, datasets=datasets, functions=functions).run()
