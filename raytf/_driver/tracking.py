"""Experiment tracking, the driver's side (tracking.mlflow): one MLflow run per raytf run, through MLflow's client
(`MlflowClient`, never its fluent API's process-wide active run: a notebook may run several fits and sweeps).

A sink of the driver: `start` at the launch's start, `on_events` with every drain, `attempt_ended`, `finish` at the
end. What is sent (params, metric points, tags) is `_core.tracking`'s; here a sender thread sends it in batches
with back-off (`_core.tracking_outbox`). Tracking never stops training: a tracker that is down or slow costs one
warning, the metrics wait in a bounded outbox until it answers, and `finish` waits at most
tracking.flush_timeout_s. MLflow is imported lazily, in the sender thread, and only when tracking is on.

A relaunch of the same run (same run directory) finds its MLflow run by the `raytf.run_key` tag and continues it;
a sweep's trials are child runs of the sweep's (`_driver.sweeptracking.SweepRun`, MLflow's `mlflow.parentRunId` tag).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from raytf import _storage as storage
from raytf._core import tracking as tr
from raytf._core import tracking_outbox as ob
from raytf._core.attempt_record import RUNNING
from raytf._driver.mlflowclient import (
    Disabled,
    error_code,
    experiment_for,
    find_run,
    make_client,
    one_line,
    shown,
    version,
)
from raytf._driver.mlflowclient import (
    check_installed as check_installed,  # (re-exported: the CLI's and a sweep's check)
)
from raytf.config import Config, redacted, to_dict, to_yaml

log = logging.getLogger("raytf")

RANKS_FILE = "ranks.png"  # the artefact of step time per rank (`raytf.plot(run, ranks=True)`)


def for_run(cfg: Config) -> MlflowRun | NoTracking:
    """The run's tracking sink: MLflow's when tracking.mlflow.uri is set (MLflow checked as installed: a ConfigError
    otherwise, before anything starts), else one that does nothing."""
    uri = cfg.tracking.mlflow.uri.strip()
    if not uri:
        return NoTracking()
    check_installed(uri)
    # (A relative SQLite path: from this process's working directory now, whatever it is when the sender connects.)
    return MlflowRun(cfg, tr.absolute_sqlite(uri, os.getcwd()))


class NoTracking:
    """tracking.mlflow.uri is empty."""

    run_id: str | None = None

    def start(self, run_dir: storage.RunDir, *, started_at: float) -> None:
        pass

    def on_events(self, events: Iterable[Any]) -> None:
        pass

    def attempt_ended(self, attempt: Mapping[str, Any]) -> None:
        pass

    def finish(self, status: str, summary: Mapping[str, Any], metrics_table: Any, run_dir: storage.RunDir,
               timeout_s: float | None = None) -> None:
        pass


@dataclass
class _End:
    status: str
    end_ms: int
    stage: str  # a local directory of files for the run's artefacts
    model: str | None  # the exported model: a local directory, or the run directory's (downloaded by the sender)
    run_dir: storage.RunDir


class MlflowRun:
    """One raytf run's MLflow run, kept up to date by a sender thread (see the module's doc)."""

    def __init__(self, cfg: Config, uri: str) -> None:
        self.cfg = cfg
        self.uri = uri
        self.experiment = tr.experiment_name(cfg.tracking.mlflow.experiment)
        self.flush_timeout_s = cfg.tracking.flush_timeout_s
        self.run_id: str | None = None
        self.experiment_id: str | None = None
        self.stream = tr.MetricStream()
        self.outbox = ob.TrackingOutbox()
        self.backoff = ob.Backoff()
        self._cond = threading.Condition()
        self._end: _End | None = None
        self._done = threading.Event()
        self._abandoned = False
        self._disabled = False
        self._thread: threading.Thread | None = None
        self._client = None
        self._key = ""
        self._start_tags: dict[str, str] = {}
        self._started_ms = 0
        self._rejected = False  # a batch MLflow refused was said once

    # -- the driver's calls (main thread) ---------------------------------------------------------------------------
    def start(self, run_dir: storage.RunDir, *, started_at: float) -> None:
        cfg = self.cfg
        self._key = tr.run_key(run_dir.uri)
        self._started_ms = int(started_at * 1000)
        self._start_tags = {
            **{tr.metric_key(k): tr.clip(str(v)) for k, v in cfg.tracking.mlflow.tags.items()},
            tr.TAG_VERSION: version(), tr.TAG_STRATEGY: cfg.cluster.strategy.value, tr.TAG_RUN_NAME: cfg.run.name,
            tr.TAG_RUN_DIR: tr.clip(run_dir.uri), tr.TAG_RUN_KEY: self._key, tr.TAG_STATUS: RUNNING}
        with self._cond:
            # The config as config.yaml holds it: every secret masked the same way (config.redact).
            self.outbox.params.update(tr.flatten(to_dict(redacted(cfg))))
            self.outbox.tags.update(self._start_tags)
        self._thread = threading.Thread(target=self._run, name="raytf-mlflow", daemon=True)
        self._thread.start()

    def on_events(self, events: Iterable[Any]) -> None:
        points = self.stream.add(events, time.time())
        if points:
            with self._cond:
                self.outbox.add_points(points)
                self._cond.notify()

    def attempt_ended(self, attempt: Mapping[str, Any]) -> None:
        """An attempt's end: its epochs still waiting for a rank are logged; its cause and decision as tags."""
        with self._cond:
            self.outbox.add_points(self.stream.flush())
            self.outbox.tags.update(tr.attempt_tags(attempt))
            self._cond.notify()

    def finish(self, status: str, summary: Mapping[str, Any], metrics_table: Any, run_dir: storage.RunDir,
               timeout_s: float | None = None) -> None:
        """The run's end: the last metrics and tags, the artefacts (learning curves, step time per rank,
        result.json, config.yaml, the exported model) and the final status, sent within `timeout_s`
        (tracking.flush_timeout_s); then given up on, said in one line. Never raises."""
        if self._thread is None:
            return
        timeout_s = self.flush_timeout_s if timeout_s is None else timeout_s
        stage = tempfile.mkdtemp(prefix="raytf-mlflow-")
        try:
            model = None
            if summary.get("model"):
                model = run_dir.path(storage.MODEL_DIR) if _local(run_dir) else storage.MODEL_DIR
            self._stage(stage, summary, metrics_table, run_dir)
            with self._cond:
                self.outbox.add_points(self.stream.flush())
                for attempt in summary.get("attempts") or []:
                    self.outbox.tags.update(tr.attempt_tags(attempt))
                self.outbox.tags[tr.TAG_STATUS] = status
                self._end = _End(status, int(time.time() * 1000), stage, model, run_dir)
                self._cond.notify()
            if not self._done.wait(timeout_s):
                with self._cond:
                    left, dropped = len(self.outbox), self.outbox.dropped
                    self._abandoned = True
                    self._cond.notify()
                if not self._disabled:
                    log.warning("tracking: MLflow at %s took nothing more within tracking.flush_timeout_s (%gs): "
                                "%d metric points/params/tags%s, the artefacts and the final status are not in "
                                "MLflow run %s; the run itself %s", shown(self.uri), timeout_s, left,
                                f" ({dropped} older points dropped)" if dropped else "", self.run_id or "(none)",
                                status)
            elif self.outbox.dropped:
                log.warning("tracking: %d metric points were dropped while MLflow did not answer (the oldest; at "
                            "most %d are held)", self.outbox.dropped, self.outbox.max_points)
        except KeyboardInterrupt:  # (a Ctrl-C during the flush: given up on)
            self._abandoned = True
        except Exception as e:  # tracking never fails a run
            log.warning("tracking: the run's end not sent to MLflow: %s", e)
            self._abandoned = True
        finally:
            shutil.rmtree(stage, ignore_errors=True)

    def _stage(self, stage: str, summary: Mapping[str, Any], table: Any, run_dir: storage.RunDir) -> None:
        """The artefacts' files, written locally: the learning curves (the run directory's, or drawn again from the
        metrics when it is on object storage), step time per rank, result.json and config.yaml as they are in the
        run directory."""
        from raytf._driver import figures, ranks

        with open(os.path.join(stage, storage.RESULT_FILE), "w") as f:
            json.dump(storage.strict_json(dict(summary)), f, indent=2, sort_keys=True, default=str, allow_nan=False)
        with open(os.path.join(stage, storage.CONFIG_FILE), "w") as f:
            f.write(to_yaml(redacted(self.cfg)))
        try:
            drawn = run_dir.path(figures.CURVES_FILE)
            if _local(run_dir) and os.path.exists(drawn):  # (just written by the run's end: not drawn twice)
                shutil.copyfile(drawn, os.path.join(stage, figures.CURVES_FILE))
            elif not (curves := figures.learning_curves(table)).empty:
                with open(os.path.join(stage, figures.CURVES_FILE), "wb") as f:
                    f.write(figures.png_bytes(curves, title=self.cfg.run.name, resizes=figures.size_changes(table)))
            df = table.to_pandas()
            if not ranks.no_breakdown(df):
                with open(os.path.join(stage, RANKS_FILE), "wb") as f:
                    f.write(figures.fig_png(figures.ranks_figure(ranks.rank_step_times(df), title=self.cfg.run.name)))
        except (OSError, ValueError, KeyError) as e:  # a plot never fails the run's end
            log.warning("tracking: figures not drawn for MLflow: %s", e)

    # -- the sender thread ------------------------------------------------------------------------------------------
    def _run(self) -> None:
        try:
            self._send_all()
        except Disabled as e:
            self._disabled = True
            log.warning("tracking: %s; the run goes on untracked", e)
        except Exception as e:  # never into the driver: tracking does not stop training
            self._disabled = True
            log.warning("tracking: stopped (%s: %s); the run goes on untracked", type(e).__name__, e)
        finally:
            self._done.set()

    def _wait(self) -> bool:
        """Until there is something to do and the back-off allows it; False once given up on."""
        with self._cond:
            while True:
                if self._abandoned:
                    return False
                now = time.time()
                if self.backoff.due(now) and (self.run_id is None or self.outbox or self._end is not None):
                    return True
                self._cond.wait(self.backoff.wait_s(now) if self.backoff.down else 1.0)

    def _send_all(self) -> None:
        while self._wait():
            try:
                if self.run_id is None:
                    self._connect()
                with self._cond:
                    batch = self.outbox.take()
                    end = self._end
                if batch:
                    self._send(batch)
                elif end is not None:
                    self._send_end(end)
                    return
                if self.backoff.succeeded():
                    log.info("tracking: MLflow at %s answers again; what was held is being sent", shown(self.uri))
            except Disabled:
                raise
            except Exception as e:
                if self.backoff.failed(time.time()):
                    log.warning("tracking: MLflow at %s does not answer (%s); training goes on, its metrics are held "
                                "(at most %d points) and sent when it answers", shown(self.uri),
                                one_line(e), self.outbox.max_points)

    def _send(self, batch: ob.Batch) -> None:
        from mlflow.entities import Metric, Param, RunTag

        try:
            self._client.log_batch(self.run_id, metrics=[Metric(*p) for p in batch.points],
                                   params=[Param(k, v) for k, v in batch.params.items()],
                                   tags=[RunTag(k, v) for k, v in batch.tags.items()])
        except Exception as e:
            if ob.permanent(error_code(e)):
                if not self._rejected:
                    self._rejected = True
                    log.warning("tracking: MLflow refused a batch (%d params, %d tags, %d points): %s; it is dropped",
                                len(batch.params), len(batch.tags), len(batch.points), one_line(e))
                return
            with self._cond:
                self.outbox.requeue(batch)
            raise

    def _connect(self) -> None:
        """The client, the experiment, and the run: this run directory's MLflow run if a launch before made one
        (its params kept: MLflow never changes a param's value), else a new one."""
        client = make_client(self.uri)
        experiment_id = experiment_for(client, self.uri, self.experiment)
        run = find_run(client, experiment_id, tr.TAG_RUN_KEY, self._key)
        if run is not None:
            client.update_run(run.info.run_id, status="RUNNING")
            with self._cond:
                new, changed = tr.changed_params(run.data.params, self.outbox.params)
                self.outbox.params = new
                if changed:
                    self.outbox.tags[tr.TAG_CHANGED] = tr.changed_tag(changed)
            if changed:
                log.info("tracking: MLflow run %s continues; its params keep their first values (%s changed: see its "
                         "%s tag)", run.info.run_id, ", ".join(sorted(changed)), tr.TAG_CHANGED)
        else:
            run = client.create_run(experiment_id, start_time=self._started_ms, tags=self._start_tags,
                                    run_name=self.cfg.run.name)
        self._client, self.experiment_id, self.run_id = client, experiment_id, run.info.run_id

    def _send_end(self, end: _End) -> None:
        """The artefacts, then the final status (a retry sends them again: MLflow overwrites artefacts)."""
        client = self._client
        client.log_artifacts(self.run_id, end.stage)
        if end.model is not None:
            model = end.model
            if not os.path.isabs(model):  # on object storage: downloaded beside the other files first
                model = end.run_dir.download_dir(end.model, os.path.join(end.stage, "model"))
            client.log_artifacts(self.run_id, model, artifact_path="model")
        client.set_terminated(self.run_id, status=tr.mlflow_status(end.status), end_time=end.end_ms)


def _local(run_dir: storage.RunDir) -> bool:
    return run_dir.local
