"""A sweep's parent MLflow run (tracking.mlflow, `raytf.sweep`): its trials' runs are its children (MLflow's client:
_driver/mlflowclient.py)."""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import threading
from collections.abc import Mapping
from typing import Any

from raytf._core import tracking as tr
from raytf._core import tracking_outbox as ob
from raytf._core.attempt_record import RUNNING
from raytf._driver.mlflowclient import check_installed, experiment_for, find_run, make_client, one_line, shown, version
from raytf.config import Config

log = logging.getLogger("raytf")


class SweepRun:
    """A sweep's parent MLflow run (`raytf.sweep`): its trials' runs are its children. Made before the trials, by
    the sweep's process, within tracking.flush_timeout_s; a tracker that does not answer then leaves the trials
    unparented (tagged `raytf.sweep` all the same), said once."""

    def __init__(self, cfg: Config, name: str, space: Mapping[str, Any]) -> None:
        self.uri = cfg.tracking.mlflow.uri.strip()
        check_installed(self.uri)
        self.name = name
        self.experiment = tr.experiment_name(cfg.tracking.mlflow.experiment)
        self.run_id: str | None = None
        self._client = None
        tags = {**{tr.metric_key(k): tr.clip(str(v)) for k, v in cfg.tracking.mlflow.tags.items()},
                tr.TAG_VERSION: version(), tr.TAG_SWEEP: name,
                tr.TAG_SWEEP_KEY: tr.sweep_key(self.experiment, name), tr.TAG_STATUS: RUNNING}
        params = {tr.metric_key(f"sweep.space.{k}"): tr.clip(str(v), tr.MAX_PARAM_VALUE) for k, v in space.items()}
        done = threading.Event()

        def make() -> None:
            try:
                client = make_client(self.uri)
                experiment_id = experiment_for(client, self.uri, self.experiment)
                run = find_run(client, experiment_id, tr.TAG_SWEEP_KEY, tags[tr.TAG_SWEEP_KEY])
                if run is None:
                    run = client.create_run(experiment_id, tags=tags, run_name=name)
                    from mlflow.entities import Param

                    items = list(params.items())
                    for i in range(0, len(items), ob.MAX_BATCH_PARAMS):
                        client.log_batch(run.info.run_id,
                                         params=[Param(k, v) for k, v in items[i:i + ob.MAX_BATCH_PARAMS]])
                else:
                    client.update_run(run.info.run_id, status="RUNNING")
                self._client, self.run_id = client, run.info.run_id
            except Exception as e:
                log.warning("tracking: the sweep's MLflow run not made at %s (%s); its trials are tracked without a "
                            "parent (tag %s=%s)", shown(self.uri), one_line(e), tr.TAG_SWEEP, name)
            finally:
                done.set()

        threading.Thread(target=make, name="raytf-mlflow-sweep", daemon=True).start()
        if not done.wait(cfg.tracking.flush_timeout_s):
            log.warning("tracking: MLflow at %s did not answer within tracking.flush_timeout_s: the sweep's trials "
                        "are tracked without a parent run (tag %s=%s)", shown(self.uri), tr.TAG_SWEEP, name)
        self.timeout_s = cfg.tracking.flush_timeout_s

    def trial_tags(self) -> dict[str, str]:
        """What each trial's run carries (tracking.mlflow.tags): the parent, and the sweep's name."""
        return {tr.TAG_SWEEP: self.name, **({tr.PARENT_RUN_ID: self.run_id} if self.run_id else {})}

    def finish(self, status: str, table: Any = None) -> None:
        """The trials' table as `trials.csv`, and the sweep's status; within tracking.flush_timeout_s."""
        if self.run_id is None:
            return
        done = threading.Event()

        def end() -> None:
            stage = tempfile.mkdtemp(prefix="raytf-mlflow-")
            try:
                if table is not None:
                    table.to_csv(os.path.join(stage, "trials.csv"), index=False)
                    self._client.log_artifacts(self.run_id, stage)
                self._client.set_tag(self.run_id, tr.TAG_STATUS, status)
                self._client.set_terminated(self.run_id, status=tr.mlflow_status(status))
            except Exception as e:
                log.warning("tracking: the sweep's MLflow run %s not ended: %s", self.run_id, one_line(e))
            finally:
                shutil.rmtree(stage, ignore_errors=True)
                done.set()

        threading.Thread(target=end, name="raytf-mlflow-sweep", daemon=True).start()
        if not done.wait(self.timeout_s):
            log.warning("tracking: MLflow at %s did not take the sweep's end within tracking.flush_timeout_s",
                        shown(self.uri))
