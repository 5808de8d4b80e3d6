"""What a launch leaves in its run directory, written by the driver: result.json (status, tasks, attempts,
checkpoints, timings), metrics.parquet (in parts while it runs) and the learning curves, also when the Ray head is
lost. `RunRecord` also keeps the run's facts the tasks' events tell (first step, replicas, versions, stragglers,
checkpoints committed)."""

from __future__ import annotations

import functools
import json
import logging
import os
import platform
import secrets
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from raytf import _storage as storage
from raytf._core import events as ev
from raytf._core import timeline as tl
from raytf._core.attempt_record import RUNNING, SUCCEEDED
from raytf._core.metrics import MetricsTable
from raytf._core.plan import Plan
from raytf._core.run_machine import Run
from raytf._core.run_states import Ended
from raytf._core.stragglers import Stragglers
from raytf._core.tasks import TaskInfo
from raytf._driver import figures
from raytf.config import Config, redacted, to_dict
from raytf.errors import RaytfError, TrainingFailedError

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


class RunRecord:
    """One launch's record. `run`: the run-level state machine (attempts, budget, error); `plan`: the run's (each
    attempt's, once placed); `previous`: the run directory's result.json from earlier launches ({} for none);
    `table`: their metrics."""

    def __init__(self, cfg: Config, run_dir: storage.RunDir, run: Run, plan: Plan, *, previous: Mapping[str, Any],
                 table: pa.Table | None, t0: float, tracking: Any, timeline: tl.Timeline | None = None) -> None:
        self.cfg, self.run_dir, self.run, self.t0 = cfg, run_dir, run, t0
        self.timeline = timeline or tl.Timeline(t0)  # the launch's phases (result.json's `timeline`)
        self.tracking = tracking  # _driver.tracking.MlflowRun or NoTracking: the run's end is sent there too
        self.previous_mlflow_run_id: str | None = previous.get("mlflow_run_id")  # an earlier launch's
        self.plan = plan  # the attempt's (elastic training: of its size)
        self.tasks: list[TaskInfo] = []  # the attempt's
        self.previous_attempts: list[dict[str, Any]] = list(previous.get("attempts", []))
        self.previous_stragglers: list[dict[str, Any]] = list(previous.get("stragglers") or [])
        self._failed_parts: set[str] = set()  # metrics parts whose write raised: their rows stay in memory
        # The rows storage has leave memory past a bound (a run that reports every step for days: issue 33).
        self.metrics = MetricsTable(cfg.run.name, table,
                                    read_stored=lambda: run_dir.metrics.read(skip=self._failed_parts))
        # Ranks slower than the others (metrics.straggler_ratio), this launch's; earlier launches' from result.json.
        self.stragglers = Stragglers(cfg.metrics.straggler_ratio, cfg.metrics.straggler_window)
        import ray  # (here: this module stays importable without Ray, for the pure tests of its writes)

        self.versions: dict[str, str] = {"ray": ray.__version__, "python": platform.python_version()}
        self.replicas = 0  # num_replicas_in_sync as the tasks' strategy reported it
        self.first_step_at: float | None = None
        self.committed: set[str] = set()  # checkpoints committed during this launch
        self.head: str | None = None  # the Ray head's address, when watched (a cluster)
        self.service: Any = None  # the tf.data service (_driver.dataservice.DataService), once the driver made it
        self.tensorboard: Any = None  # the TensorBoard sink: closed within a deadline when the head is lost
        self._hosts: dict[int, str] = {}  # rank -> host, of the attempt under way
        self._lock = threading.Lock()  # result.json is written by the main thread and the head watch
        self._last_flush = time.monotonic()  # the last metrics part's write
        self._launch_id = f"{int(t0)}-{secrets.token_hex(3)}"  # names this launch's metrics parts
        self._parts = 0
        self._written: dict[str, Any] | None = None  # the last result.json written, as read back

    # -- what the tasks tell -------------------------------------------------------------------
    def placed(self, plan: Plan, tasks: Iterable[TaskInfo]) -> None:
        self.plan, self.tasks = plan, list(tasks)
        self._hosts = {t.rank: t.host for t in self.tasks}

    def observe(self, e: ev.Event) -> None:
        """One of the tasks' events (before the sinks see it)."""
        attempts = self.run.attempts
        committed = attempts[-1].observe(e, attempts[-2] if len(attempts) > 1 else None)
        if committed is not None:
            self.committed.add(committed)
        if e.kind in (ev.STEP, ev.EPOCH):
            if self.first_step_at is None:
                self.first_step_at = e.time
            self.timeline.mark(tl.FIRST_STEP, e.time)
            self.timeline.latest(tl.LAST_STEP, e.time)
        if e.kind == ev.STARTED:
            self.timeline.task_started(e.payload)
            self.replicas = max(self.replicas, int(e.payload.replicas))
            for k in ("tensorflow", "keras"):
                if (version := getattr(e.payload, k)) is not None:
                    self.versions[k] = version
        self.metrics.add(e)
        if e.kind == ev.STEP:
            self._straggler_watch(e)

    def _straggler_watch(self, e: ev.Event) -> None:
        for found in self.stragglers.add(attempt=e.attempt, rank=e.rank, role=e.role, host=self._hosts.get(e.rank, ""),
                                         step=int(e.payload.step), metrics=e.payload.metrics):
            if found.over:
                log.info("straggler: %s %d is no longer slow (%s, found at step %d)", found.role, found.rank,
                         found.part, found.step)
            else:
                log.warning(found.line(self.cfg.metrics.straggler_ratio))

    # -- what is written -----------------------------------------------------------------------
    def summary(self, status: str) -> dict[str, Any]:
        ckpts = self._checkpoint_uris()
        now = time.time()
        resumed_from = self.run.resumed_from
        return {
            "run": self.cfg.run.name,
            "run_dir": self.run_dir.uri,
            "status": status,
            "strategy": self.cfg.cluster.strategy.value,
            "num_replicas_in_sync": self.replicas,
            "tasks": [i.to_json() for i in self.tasks],
            "attempts": self.previous_attempts + [a.to_json() for a in self.run.attempts],
            "roles": {role: sum(1 for t in self.plan.tasks if t.role == role)
                      for role in dict.fromkeys(t.role for t in self.plan.tasks)},
            "lost_tasks": self.run.lost_tasks,
            "stragglers": self.previous_stragglers + self.stragglers.to_json(),
            # The tf.data service (data_service.workers): where its servers ran, who read through it, what was lost.
            "data_service": self.service.summary() if self.service is not None else None,
            "resumed_from": self.run_dir.checkpoints.uri(resumed_from.dir) if resumed_from else None,
            "final_metrics": self.metrics.final(),
            "last_checkpoint": ckpts[-1] if ckpts else None,
            "model": self.run_dir.checkpoints.model_uri(),
            "checkpoints": ckpts,
            "budget": self.run.budget.to_json(),
            "versions": self.versions,
            "error": None if self.run.error is None else self.run.error.to_json(),
            "started_at": self.t0,
            "ended_at": None if status == RUNNING else now,
            "duration_s": round(now - self.t0, 3),
            "first_step_s": None if self.first_step_at is None else round(self.first_step_at - self.t0, 3),
            "config": to_dict(redacted(self.cfg)),
            # tracking.mlflow: this run's MLflow run (an earlier launch's when this one has none yet).
            "mlflow_run_id": self.tracking.run_id or self.previous_mlflow_run_id,
            # This launch's phases, in seconds since its process started (raytf issue 38; _core/timeline.py).
            "timeline": self.timeline.to_json(),
        }

    def _checkpoint_uris(self) -> list[str]:
        return [self.run_dir.checkpoints.uri(e.dir) for e in self.run_dir.checkpoints.list() if e.committed]

    def write_result(self, status: str, lock_timeout_s: float = -1) -> None:
        locked = self._lock.acquire(timeout=lock_timeout_s)
        try:  # (a holder stuck on storage for lock_timeout_s: written anyway)
            summary = self.summary(status)
            self.run_dir.write_json(storage.RESULT_FILE, summary)
            # What result.json holds now, as JSON gives it back: the run's Outcome without reading it from storage.
            self._written = json.loads(json.dumps(summary, sort_keys=True, default=str))
        finally:
            if locked:
                self._lock.release()

    def note_running(self) -> None:
        """result.json `running` as an attempt starts: storage that refuses it now is warned of, never the run's end
        (the run's end writes it again; raytf issue 71: a retry's write failed a run that storage let go on)."""
        try:
            self.write_result(RUNNING)
        except (RaytfError, OSError) as e:
            log.warning("result.json not updated: %s; the run goes on and its end writes it again", e)

    def _result_unwritten(self, status: str, error: Exception) -> str:
        """The line of a run whose result.json could not be written at its end: what it would have said, and where
        the last good state is."""
        try:
            latest = self.run_dir.checkpoints.latest()
            last = (f"its last committed checkpoint is {self.run_dir.checkpoints.uri(latest.dir)} (a relaunch of "
                    f"run.name={self.cfg.run.name} resumes from it)" if latest is not None else
                    "it committed no checkpoint")
        except (RaytfError, OSError) as e:
            last = f"its checkpoints could not be listed either ({e})"
        return f"result.json not written ({error}): the run ended {status}; {last}"

    def write_curves(self) -> None:
        """learning_curves.png in the run directory (a plot must never fail a run)."""
        try:
            table = self.metrics.to_arrow()
            curves = figures.learning_curves(table)
            if not curves.empty:
                self.run_dir.write_bytes(figures.CURVES_FILE, figures.png_bytes(
                    curves, title=self.cfg.run.name, resizes=figures.size_changes(table)))
        except (RaytfError, OSError, ValueError, ImportError) as e:  # (ImportError: matplotlib's, broken or racing)
            log.warning("learning curves not plotted: %s: %s", type(e).__name__, e)

    def write_metrics(self, retry: bool = True) -> None:
        """metrics.parquet whole (the parts written so far folded in): at the run's end (a lost head's too)."""
        if len(self.metrics):
            self.run_dir.metrics.write(self.metrics.to_arrow(), retry=retry)
            self.metrics.all_stored()

    def flush_metrics(self, force: bool = False) -> None:
        """Once per loop round (and between attempts, forced): the rows since the last flush as one more part,
        every metrics.flush_interval_s while rows came in. Its cost is what it adds, not the whole run."""
        if not self.metrics.dirty or (not force and
                                      time.monotonic() - self._last_flush < self.cfg.metrics.flush_interval_s):
            return
        self._parts += 1
        part = f"{self._launch_id}-{self._parts:06d}"
        table = self.metrics.take_new()
        try:
            self.run_dir.metrics.append(table, part, retry=False)
        except RaytfError as e:  # storage away for a while: the rows stay in memory for the run's end
            self._failed_parts.add(f"{part}.parquet")
            log.warning("metrics part %s not written: %s", part, e)
        else:
            self.metrics.stored(table)
        self._last_flush = time.monotonic()

    def end(self, status: str, ended_by: BaseException | None, closing: Iterable[Callable[[], None]] = ()) -> None:
        """The run's last writes (after `closing`, the sinks): every one is tried; a failure among them is
        raised only when nothing else ended the run and it did not fail (it must never replace the error the user
        needs to see); result.json's own says what the run would have recorded and where its last good state is."""
        first: Exception | None = None
        result = functools.partial(self._timed, lambda: self.write_result(status), tl.RESULT_WRITTEN, before=True)
        for write in (*closing, functools.partial(self._timed, self.write_curves, tl.CURVES_WRITTEN),
                      functools.partial(self._timed, self.write_metrics, tl.METRICS_WRITTEN),
                      # (result.json's own mark before it is written: the timeline it holds has it)
                      result,
                      lambda: self.track_end(status)):
            try:
                write()
            except Exception as e:
                if write is result:  # what the run would have said, and where its last good state is
                    log.error("%s", self._result_unwritten(status, e))
                else:
                    log.error("the run's end not fully recorded in %s: %s", self.run_dir.uri, e)
                first = first or e
        if first is not None and ended_by is None and self.run.error is None:  # (a failed run's error comes first)
            raise first

    def _timed(self, write: Callable[[], None], phase: str, before: bool = False) -> None:
        """`write`, and the timeline's mark of `phase` when it is done (or, `before`, when it starts)."""
        if before:
            self.timeline.mark(phase, time.time())
        write()
        if not before:
            self.timeline.mark(phase, time.time())

    def track_end(self, status: str, timeout_s: float | None = None) -> None:
        """The run's end in MLflow (tracking.mlflow), bounded by tracking.flush_timeout_s; result.json again when the
        MLflow run became known only now (a tracker that came back during the flush)."""
        known = self.tracking.run_id
        self.tracking.finish(status, self.summary(status), self.metrics.to_arrow(), self.run_dir, timeout_s)
        if self.tracking.run_id != known:
            self.write_result(status, lock_timeout_s=10.0)  # (from the head watch too: never waits for good)

    def outcome(self, status: str) -> Outcome:
        summary = self._written if self._written is not None and self._written["status"] == status else \
            json.loads(json.dumps(self.summary(status), sort_keys=True, default=str))
        return Outcome(status=status, run_dir=self.run_dir.uri, config=self.cfg, summary=summary,
                       metrics_table=self.metrics.to_arrow(), error=self.run.error,
                       checkpoints=summary["checkpoints"])

    def head_lost_message(self, why: str, done: bool) -> str:
        """The one line a lost head ends the run with (`done`: training had succeeded, the teardown was left)."""
        latest = self.run_dir.checkpoints.latest()
        resume = f"it resumes from {latest.name}" if latest is not None else "it starts from scratch"
        return (f"run {self.cfg.run.name} {'succeeded, then' if done else 'failed:'} lost the Ray head at "
                f"{self.head or '?'} ({why}); a Ray cluster does not outlive its head and its other nodes stop "
                f"too. Fix: restart the cluster (ray start --head, then the workers) and launch again: {resume}")

    def record_head_lost(self, ended: Ended, message: str) -> None:
        """From the head watch's thread, once the run has ended on it (the driver's `_head_lost`): the cluster is
        gone and the main thread may be blocked on it for good (Ray itself ends this process a little later). Record
        the run, say what happened in one line, exit: 1, or 0 when training had already succeeded and only the
        teardown was left."""
        try:
            self.write_metrics(retry=False)
            self.write_result(ended.status, lock_timeout_s=10.0)
        except Exception as e:  # storage too: still say what happened, and go
            log.error("result.json not written: %s", e)
        if self.tensorboard is not None:  # an object store's TensorBoard files: uploaded if it can, never left in /tmp
            self.tensorboard.close_within(10.0)
        try:  # the MLflow run's end too, briefly (Ray ends this process soon)
            self.track_end(ended.status, timeout_s=min(10.0, self.cfg.tracking.flush_timeout_s))
        except Exception as e:
            log.error("tracking: the run's end not sent: %s", e)
        log.error(message)
        for handler in logging.getLogger().handlers + log.handlers:
            handler.flush()
        sys.stdout.flush()
        sys.stderr.flush()
        # Not an exception: the main thread may sit in a Ray call that never returns without the GCS.
        os._exit(0 if ended.status == SUCCEEDED else 1)
