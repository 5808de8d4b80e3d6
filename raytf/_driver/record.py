"""What a launch leaves in its run directory, written by the driver: result.json (status, tasks, attempts,
checkpoints, timings), metrics.parquet and the learning curves, also when the Ray head is lost. A mixin of
`Driver` (its state is the driver's)."""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from raytf import _storage as storage
from raytf._core import checkpoints, failure, figures
from raytf._core.attempts import FAILED, RUNNING, SUCCEEDED
from raytf._core.metrics import MetricsTable
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
    """The driver's outputs. Expects the driver's attributes: cfg, run_dir, metrics, plan, tasks, attempts,
    previous_attempts, resumed_from, replicas, lost_tasks, stragglers, previous_stragglers, versions, error, t0,
    first_step_at."""

    metrics: MetricsTable
    _result_lock: threading.Lock
    _last_flush: float
    _launch_id: str  # names this launch's metrics parts
    _parts_written: int
    head_watch: object | None  # _driver.headwatch.HeadWatch on a cluster
    tracking: Any  # _driver.tracking.MlflowRun or NoTracking
    previous_mlflow_run_id: str | None  # result.json's, from an earlier launch

    def _write_curves(self) -> None:
        """learning_curves.png in the run directory (a plot must never fail a run)."""
        try:
            table = self.metrics.to_arrow()
            curves = figures.learning_curves(table)
            if not curves.empty:
                self.run_dir.write_bytes(figures.CURVES_FILE, figures.png_bytes(
                    curves, title=self.cfg.run.name, resizes=figures.size_changes(table)))
        except (RaytfError, OSError, ValueError) as e:
            log.warning("learning curves not plotted: %s", e)

    def _write_metrics(self, retry: bool = True) -> None:
        """metrics.parquet whole (the parts written so far folded in): at the run's end."""
        if len(self.metrics):
            self.run_dir.write_metrics(self.metrics.to_arrow(), retry=retry)

    def _checkpoint_uris(self) -> list[str]:
        return [self.run_dir.uri_of(storage.CHECKPOINTS_DIR, e.dir)
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
            "stragglers": self.previous_stragglers + self.stragglers.to_json(),
            # The tf.data service (data_service.workers): where its servers ran, who read through it, what was lost.
            "data_service": self.service.summary() if getattr(self, "service", None) is not None else None,
            "resumed_from": (self.run_dir.uri_of(storage.CHECKPOINTS_DIR, self.resumed_from.dir)
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
            # tracking.mlflow: this run's MLflow run (an earlier launch's when this one has none yet).
            "mlflow_run_id": self.tracking.run_id or self.previous_mlflow_run_id,
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

    def _record_end(self, status: str, ended_by: BaseException | None, closing=()) -> None:
        """The run's last writes (after `closing`, the sinks): every one is tried; a failure among them is
        raised only when nothing else ended the run (it must never replace the error the user needs to see)."""
        first: Exception | None = None
        for write in (*closing, self._write_curves, self._write_metrics, lambda: self._write_result(status),
                      lambda: self._track_end(status)):
            try:
                write()
            except Exception as e:
                log.error("the run's end not fully recorded in %s: %s", self.run_dir.uri, e)
                first = first or e
        if first is not None and ended_by is None:
            raise first

    def _track_end(self, status: str, timeout_s: float | None = None) -> None:
        """The run's end in MLflow (tracking.mlflow), bounded by tracking.flush_timeout_s; result.json again when the
        MLflow run became known only now (a tracker that came back during the flush)."""
        known = self.tracking.run_id
        self.tracking.finish(status, self.summary(status), self.metrics.to_arrow(), self.run_dir, timeout_s)
        if self.tracking.run_id != known:
            self._write_result(status, lock_timeout_s=10.0)  # (from the head watch too: never waits for good)

    def _flush_metrics(self, force: bool = False) -> None:
        """Once per loop round (and between attempts, forced): the rows since the last flush as one more part,
        every metrics.flush_interval_s while rows came in. Its cost is what it adds, not the whole run."""
        if not self.metrics.dirty or (not force and
                                      time.monotonic() - self._last_flush < self.cfg.metrics.flush_interval_s):
            return
        self._parts_written += 1
        part = f"{self._launch_id}-{self._parts_written:06d}"
        try:
            self.run_dir.append_metrics(self.metrics.take_new(), part, retry=False)
        except RaytfError as e:  # storage away for a while: the rows stay in memory for the run's end
            log.warning("metrics part %s not written: %s", part, e)
        self._last_flush = time.monotonic()

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
        tensorboard = getattr(self, "tensorboard", None)
        if tensorboard is not None:  # an object store's TensorBoard files: uploaded if it can, never left in /tmp
            tensorboard.close_within(10.0)
        try:  # the MLflow run's end too, briefly (Ray ends this process soon)
            self._track_end(SUCCEEDED if done else FAILED, timeout_s=min(10.0, self.cfg.tracking.flush_timeout_s))
        except Exception as e:
            log.error("tracking: the run's end not sent: %s", e)
        log.error(message)
        for handler in logging.getLogger().handlers + log.handlers:
            handler.flush()
        sys.stdout.flush()
        sys.stderr.flush()
        # Not an exception: the main thread may sit in a Ray call that never returns without the GCS.
        os._exit(0 if done else 1)
