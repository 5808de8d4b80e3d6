"""The outcome of a run: `result.json` on storage, and the Result object `fit` returns."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from raytf import _storage as storage
from raytf._core.attempt_record import RUNNING, SUCCEEDED
from raytf.config import Config, StorageConfig, load_config
from raytf.config.redact import storage_path_problem, without_userinfo
from raytf.errors import RaytfError, TrainingFailedError


@dataclass
class Result:
    """What a run produced. `metrics` is a pandas DataFrame with one row per reported step or epoch of
    every rank; `metrics_table` is the same as an Arrow table."""

    status: str
    run_dir: str
    config: Config
    summary: dict[str, Any]
    metrics_table: pa.Table
    error: TrainingFailedError | None = None
    checkpoints: list[str] = field(default_factory=list)
    # The storage options this Result reads its run with (`load_model`): what the reader gave `load_result`, or
    # the run's own config when `fit` returned it; never the ones recorded in a run directory's config.yaml.
    storage: StorageConfig | None = field(default=None, repr=False, compare=False)

    @property
    def ok(self) -> bool:
        return self.status == SUCCEEDED

    @property
    def metrics(self):
        return self.metrics_table.to_pandas()

    @property
    def final_metrics(self) -> dict[str, Any]:
        return dict(self.summary.get("final_metrics") or {})

    @property
    def last_checkpoint(self) -> str | None:
        return self.checkpoints[-1] if self.checkpoints else None

    @property
    def tasks(self) -> list[dict[str, Any]]:
        return list(self.summary.get("tasks") or [])

    @property
    def attempts(self) -> list[dict[str, Any]]:
        return list(self.summary.get("attempts") or [])

    @property
    def model_path(self) -> str | None:
        """The exported SavedModel (<run>/model), if training completed with a Keras model registered."""
        return self.summary.get("model")

    @property
    def mlflow_run_id(self) -> str | None:
        """The run's MLflow run (tracking.mlflow.uri set): one for every launch, retry and relaunch of the run; None
        when it was not tracked (or the tracker never answered)."""
        return self.summary.get("mlflow_run_id")

    @property
    def best_checkpoint(self) -> str | None:
        """The committed checkpoint whose epoch had the lowest val_loss (else loss) on rank 0."""
        if not self.checkpoints:
            return None
        df = self.metrics_table.to_pandas() if self.metrics_table.num_rows else None
        if df is None or "kind" not in df:
            return self.last_checkpoint
        col = "val_loss" if "val_loss" in df else "loss" if "loss" in df else None
        epochs = df[(df["kind"] == "epoch") & (df["rank"] == df["rank"].min())]
        if col is None or epochs.empty:
            return self.last_checkpoint
        score = epochs.groupby("step")[col].last()
        scored = [(score.get(int(c.rsplit("-s", 1)[1])), c) for c in self.checkpoints]
        scored = [(v, c) for v, c in scored if v is not None]
        return min(scored)[1] if scored else self.last_checkpoint

    def breakdown(self, attempt: int | None = None):
        """Where each rank's step time went: a pandas DataFrame, one row per (role, rank) of `attempt` (None: the
        latest attempt with step rows), with the medians over its step rows of step_time_s, input_wait_s,
        collective_s, save_s and compute_s (seconds per step; NaN where a part was not measured), the steps
        covered, the input share and GPU use; `host` when result.json's tasks are that attempt's
        (`raytf._driver.ranks.rank_breakdown`). Empty for a run made before raytf measured it."""
        from raytf._driver.ranks import rank_breakdown

        return rank_breakdown(self.metrics_table, attempt, summary=self.summary)

    def load_model(self, strategy=None):
        """The trained model, loaded with `tf_keras` (TensorFlow's legacy Keras 2, the `tf-keras` package), as
        it was exported: a `tf_keras.Model`, with no raytf strategy; within `strategy.scope()` if given, as the
        seed tutorial does. Imports TensorFlow into this process.

        Not `tf.keras`: under Keras 3 (TensorFlow's default without `TF_USE_LEGACY_KERAS=1` set before its
        first import) `tf.keras.models.load_model` refuses the exported SavedModel ("File format not
        supported"); `tf_keras.models.load_model(path)` is the way without raytf.

        The run is found from `run_dir` (absolute, or a URI), whatever this process's working directory, and
        read with `storage` (the options given to `load_result`, or the run's own config from `fit`), never with
        the storage settings recorded in the run's config.yaml: a planted one could send this process's
        credentials to another endpoint.

        Raises:
            FileNotFoundError: the run exported no model.
            ImportError: tf_keras is not installed.
        """
        import shutil
        import tempfile

        if not self.model_path:
            raise FileNotFoundError(f"{self.run_dir} has no exported model (checkpoint.export_model, and "
                                    "ctx.restore(model=...) in the training function)")
        try:
            import tf_keras
        except ImportError as e:
            raise ImportError("Result.load_model() needs tf_keras (pip install tf-keras): the model is a tf_keras "
                              "SavedModel, which Keras 3's tf.keras cannot read") from e
        rd = _run_dir_of(self.run_dir, self.storage)
        local = tempfile.mkdtemp(prefix="raytf-model-")
        try:
            rd.download_dir(storage.MODEL_DIR, local)
            if strategy is None:
                return tf_keras.models.load_model(local)
            with strategy.scope():
                return tf_keras.models.load_model(local)
        finally:  # the model is in memory now: the download goes
            shutil.rmtree(local, ignore_errors=True)

    def raise_for_status(self) -> Result:
        """This Result; or, when its run failed, raise its TrainingFailedError (carrying this Result)."""
        if self.error is not None:
            self.error.result = self
            raise self.error
        return self

    def __repr__(self) -> str:
        return (f"Result(status={self.status!r}, run_dir={self.run_dir!r}, "
                f"final_metrics={self.final_metrics!r}, last_checkpoint={self.last_checkpoint!r})")


def load_result(run_dir: str, storage_options: StorageConfig | None = None) -> Result:
    """Read a finished (or running) run back from `<storage>/<run name>` (local path or URI). A relative path is
    taken from the working directory once, here: the Result's `run_dir` is absolute.

    Args:
        run_dir: the run's directory; S3 options may ride in a URI's query (`s3://b/runs/x?scheme=http`).
        storage_options: how to open it (S3 endpoint, region, storage.credentials_file or keys), its `path`
            unused; the Result's `load_model` uses the same. Never taken from the run's own config.yaml.
    """
    base, _, query = run_dir.partition("?")
    parent, _, name = base.rstrip("/").rpartition("/")
    options = dataclasses.replace(storage_options or StorageConfig(),
                                  path=(parent or ".") + (f"?{query}" if query else ""))
    rd = storage.RunDir(options, name)
    summary = rd.read_json(storage.RESULT_FILE)
    cfg = load_config(_without_path_credentials(_yaml_dict(rd.read_text(storage.CONFIG_FILE))))
    table = rd.metrics.read() if rd.metrics.exists() else pa.table({})
    ckpts = [rd.uri_of(storage.CHECKPOINTS_DIR, e.dir) for e in rd.checkpoints.list() if e.committed]
    return Result(status=summary.get("status", RUNNING), run_dir=rd.uri, config=cfg, summary=summary,
                  metrics_table=table, checkpoints=ckpts, storage=rd.options)


def _run_dir_of(run_dir: str, options: StorageConfig | None) -> storage.RunDir:
    """The RunDir of `run_dir` (an absolute path or a URI, as `Result.run_dir` holds it), opened with the reader's
    storage options (S3 endpoint, scheme, region, credentials; a URI query of their path) but not their path,
    which may be relative to the directory the run was launched from. None: the defaults (this node's
    credentials chain)."""
    base = run_dir.rstrip("/")
    parent, _, name = base.rpartition("/")
    if not parent:
        parent = "/" if base.startswith("/") else "."
    options = options or StorageConfig()
    query = options.path.partition("?")[2]
    if query and "://" in parent and "?" not in parent:  # S3 options given in the path's query
        parent = f"{parent}?{query}"
    return storage.RunDir(dataclasses.replace(options, path=parent), name)


def _without_path_credentials(data: dict) -> dict:
    """A run recorded before storage.path's credentials were refused (raytf issue 19) is still read: its recorded
    path (shown only; never used to open anything) without its userinfo and query."""
    st = data.get("storage")
    if isinstance(st, dict) and isinstance(st.get("path"), str) and storage_path_problem(st["path"]):
        st["path"] = without_userinfo(st["path"]).partition("?")[0]
    return data


def _yaml_dict(text: str) -> dict:
    """A run's config.yaml as data. Its strings stay strings: an interpolation in a planted file
    (`${oc.env:AWS_SECRET_ACCESS_KEY}` as an endpoint, say) would otherwise be resolved by the reader, in the
    reader's environment, when the config is loaded (raytf issue 19)."""
    import yaml

    def literal(value):
        if isinstance(value, str):
            return value.replace("${", "\\${")  # OmegaConf's escape: the text "${", never an interpolation
        if isinstance(value, dict):
            return {k: literal(v) for k, v in value.items()}
        if isinstance(value, list):
            return [literal(v) for v in value]
        return value

    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise RaytfError(f"{storage.CONFIG_FILE} of this run is not readable YAML: {e}") from None
    if not isinstance(data, dict):
        raise RaytfError(f"{storage.CONFIG_FILE} of this run is not a mapping (a {type(data).__name__})")
    return literal(data)
