"""Coming from Ray Train: `from raytf.compat import TensorflowTrainer`, in place of
`from ray.train.tensorflow import TensorflowTrainer`, runs a Ray Train program on raytf, otherwise unchanged.

Mapped (Ray Train 2.60, v2):
- `TensorflowTrainer(train_loop_per_worker, train_loop_config=, scaling_config=, run_config=, datasets=)`: the loop
  runs on every MultiWorkerMirroredStrategy worker with TF_CONFIG set, called with `train_loop_config` (train.params;
  a config the YAML cannot hold is sent with the function) or with nothing, as Ray does. A loop defined in
  `__main__` or a notebook cell is sent by value.
- `ScalingConfig(num_workers, use_gpu, resources_per_worker, placement_strategy, accelerator_type)`:
  cluster.num_workers, cluster.worker.{cpus, gpus, memory_gb, custom}, cluster.placement_strategy; a (min, max)
  num_workers is elastic training (cluster.min_workers; elastic_resize_monitor_interval_s:
  cluster.elastic.grow_check_s).
- `RunConfig(name, storage_path, worker_runtime_env, checkpoint_config, failure_config)`: run.name (the same name
  again resumes from its newest checkpoint), storage.path (Ray's default ~/ray_results), ray.runtime_env;
  `CheckpointConfig(num_to_keep)`: checkpoint.keep_last; `FailureConfig(max_failures)`: failure.max_failures, and
  the program's own exceptions are retried too, as Ray does (failure.retry_user_errors);
  `FailureConfig(max_preemption_failures)`: failure.max_preemptions (preemptions are counted apart from failures,
  each retried after every worker saved at one agreed step).
- `datasets={name: ray.data.Dataset}` (or a function returning one): each worker's equal share
  (`ray.train.get_dataset_shard(name)`).
- Inside the loop: `ray.train.report(metrics, checkpoint=Checkpoint.from_directory(...))`, `get_checkpoint()`,
  `get_context()`, `get_dataset_shard(name)` and Keras' `ReportCheckpointCallback` (raytf._task.raytrain says how).
- `trainer.fit()` returns a `ray.train.Result` (this module's subclass): `metrics`, `checkpoint` (a
  ray.train.Checkpoint of the newest committed checkpoint), `error`, `path` (the run directory),
  `metrics_dataframe`, `best_checkpoints`, and `raytf` (raytf's own Result: every rank's metrics, attempts,
  breakdown). A failed run raises TrainingFailedError, a `ray.train.WorkerGroupError` (worker_failures by rank)
  that is also raytf's TrainingFailedError.

Not mapped: Tune (`Tuner(trainer)`: use raytf.sweep), ScalingConfig's label_selector, use_tpu, topology;
RunConfig's storage_filesystem (an error: pass a URI), callbacks, logging_config; CheckpointConfig's
checkpoint_score_attribute (raytf keeps the newest); FailureConfig's controller_failure_limit (raytf's driver's own
errors count against max_failures), relax_collectives_on_preemption and preemption_grace_s (every worker saves at
once at the notice); `dataset_config` (every dataset is split equally, Ray's default); `tensorflow_config`;
`validation_config` (an error); `metadata`, and `resume_from_checkpoint` but under Ray Train v1 (refused by Ray
Train v2 as well; v1's: get_checkpoint() returns it until the run commits one of its own);
`Result.return_value` (None); metrics that are not numbers (raytf's metrics table holds numbers). Differences:
`Result.metrics` is rank 0's report of the newest checkpoint (its last report when none was committed);
`metrics_dataframe` holds every report of rank 0, one row each (Ray Train's: one per checkpoint kept); a checkpoint
directory holds raytf's `_COMMITTED.json` manifest beside the loop's files; only rank 0's reported checkpoint is
kept (Ray Train merges every rank's files).

Ray Train v1's API (RAY_TRAIN_V2_ENABLED=0, as Ray's own CI still runs its TensorFlow tests) is mapped as v2's is:
its ScalingConfig, RunConfig, CheckpointConfig and FailureConfig (ray.air.config's) are read the same way (its own
settings, e.g. RunConfig's stop, sync_config, verbose, log_to_file, progress_reporter, FailureConfig's fail_fast,
ScalingConfig's trainer_resources, warned of and ignored); in the loop, v1's `ray.train.report`, `get_checkpoint`,
`get_context()` and `get_dataset_shard` reach raytf as v2's do (each task sets both seams, whichever its process
bound); a failure raises this module's TrainingFailedError, which is v1's `ray.train.TrainingFailedError` too.

`raytf_config=` (not Ray's) takes raytf overrides on top, e.g. `["failure.hang_timeout_s=3600"]`: a rank that
reports no Keras step and no `ray.train.report` for failure.hang_timeout_s (300 s) is taken for hung.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ray.train.base_trainer import TrainingFailedError as TrainingFailedErrorV1
from ray.train.v2.api.exceptions import WorkerGroupError
from ray.train.v2.api.result import Result as RayResult

from raytf import errors
from raytf._core.function import Functions
from raytf._core.raytrain import StartingFrom, run_overrides, scaling_overrides
from raytf.config import load_config
from raytf.errors import ConfigError

log = logging.getLogger("raytf")

__all__ = ["Result", "TensorflowTrainer", "TrainingFailedError"]


class TrainingFailedError(WorkerGroupError, errors.TrainingFailedError, TrainingFailedErrorV1):
    """trainer.fit() failed: Ray Train's WorkerGroupError (`worker_failures`: rank -> the WorkerError of each worker
    that failed) and raytf's TrainingFailedError (`result`, `rank`, `role`, `host`, `remote_traceback`); also Ray
    Train v1's TrainingFailedError (ray.train's with RAY_TRAIN_V2_ENABLED=0), which a v1 program catches."""

    def __init__(self, error_message: str, worker_failures: dict[int, Exception], *,
                 failures: dict | None = None, result: Any = None) -> None:
        WorkerGroupError.__init__(self, error_message, worker_failures)
        self.failures = dict(failures or {})
        self.result = result

    def __reduce__(self):
        return (_rebuild_failure, (self._error_message, self.worker_failures, self.failures, self.result))


def _rebuild_failure(message, worker_failures, failures, result) -> TrainingFailedError:
    return TrainingFailedError(message, worker_failures, failures=failures, result=result)


@dataclass
class Result(RayResult):
    """Ray Train's Result of a run raytf trained; `raytf` is raytf's own Result of it."""

    raytf: Any = None


class TensorflowTrainer:
    """Ray Train's TensorflowTrainer, run by raytf (this module's docstring says what maps to what)."""

    def __init__(
        self,
        train_loop_per_worker: Callable[..., Any],
        *,
        train_loop_config: Mapping[str, Any] | None = None,
        tensorflow_config: Any = None,
        scaling_config: Any = None,
        dataset_config: Any = None,
        run_config: Any = None,
        datasets: Mapping[str, Any] | None = None,
        validation_config: Any = None,
        metadata: Mapping[str, Any] | None = None,
        resume_from_checkpoint: Any = None,
        raytf_config: Sequence[str] | Mapping[str, Any] | None = None,
    ) -> None:
        from ray.train.v2._internal.constants import is_v2_enabled  # (private: ray_train_private's table rows)

        if (resume_from_checkpoint is not None and is_v2_enabled()) or metadata is not None:
            # Ray Train v2 refuses both (DeprecationWarning, raised); so does its stand-in. v1 resumes from the
            # checkpoint given (StartingFrom).
            what = "resume_from_checkpoint" if metadata is None else "metadata"
            raise DeprecationWarning(f"TensorflowTrainer({what}=...) is not supported by Ray Train v2 (nor by "
                                     "raytf.compat, whose Ray Train v1 mapping has resume_from_checkpoint only): "
                                     "resume with RunConfig(name=<the run's name>), pass values in "
                                     "train_loop_config")
        self.resume_from_checkpoint = resume_from_checkpoint
        if validation_config is not None:
            raise ConfigError("TensorflowTrainer(validation_config=...) is not mapped: validate in the loop and "
                              "report the metrics, or use raytf's side-car evaluator (cluster.evaluator)")
        if not callable(train_loop_per_worker):
            raise ConfigError(f"train_loop_per_worker ({train_loop_per_worker!r}) is not a function")
        self.train_loop_per_worker = train_loop_per_worker
        self.train_loop_config = dict(train_loop_config or {})
        if run_config is None:  # Ray's defaults: its storage_path (~/ray_results), no failure retried
            from ray.train import RunConfig

            run_config = RunConfig()
        self.scaling_config, self.run_config = scaling_config, run_config
        self.datasets = dict(datasets or {})
        self.dataset_config = dataset_config
        self.raytf_config = raytf_config
        del tensorflow_config  # (Ray's TensorflowConfig sets TF_CONFIG; raytf does)

    def config(self):
        """The raytf Config this trainer runs: Ray's settings mapped, train.ray_train on, raytf_config on top.
        Warns once per setting that has no meaning here."""
        return self._plan()[0]

    def _plan(self) -> tuple[Any, Functions]:
        """The Config, and the loop pickled for the tasks (with its config when train.params cannot hold it)."""
        from raytf._driver.pickling import pack

        scaling, warnings = scaling_overrides(self.scaling_config)
        run, more = run_overrides(self.run_config)
        warnings += more
        split = getattr(self.dataset_config, "_datasets_to_split", "all")
        if split != "all":
            warnings.append(f"raytf.compat: DataConfig(datasets_to_split={split!r}) is not mapped: every dataset is "
                            "split equally among the workers (Ray Train's default)")
        for line in warnings:
            log.warning("%s", line)
        overrides = {**scaling, **run, "train.ray_train": True}
        fn = self.train_loop_per_worker
        if self.train_loop_config:
            params = _as_params(self.train_loop_config)
            if params is not None:
                overrides["train.params"] = params
            elif _takes_config(fn):  # not YAML's types: sent with the function, which then takes no argument
                import functools

                fn = functools.partial(fn, self.train_loop_config)
        if self.resume_from_checkpoint is not None:
            fn = StartingFrom(fn, self.resume_from_checkpoint)
        functions = Functions(train=pack(fn, "train_loop_per_worker"))
        cfg = load_config(None, overrides, program=functions.recorded())
        return (load_config(cfg, self.raytf_config) if self.raytf_config else cfg), functions

    def fit(self) -> Result:
        """Train, and return Ray Train's Result; raise TrainingFailedError (a ray.train.WorkerGroupError) when the
        run fails, as Ray Train's trainer.fit() does."""
        from raytf._task import ray_train_private
        from raytf.api.fit import _fit

        ray_train_private.check()  # one line now if this Ray moved what the tasks need
        cfg, functions = self._plan()
        datasets = {name: ds() if callable(ds) else ds for name, ds in self.datasets.items()} or None
        result = _fit(cfg, datasets=datasets, functions=functions, raise_on_failure=False)
        out = ray_result(result)
        if out.error is not None:
            raise out.error
        return out


def _takes_config(fn: Callable[..., Any]) -> bool:
    """Whether Ray Train would call the loop with its config (one parameter) rather than with none."""
    import inspect

    try:
        return len(inspect.signature(fn).parameters) == 1
    except (TypeError, ValueError):
        return True


def _as_params(config: Mapping[str, Any]) -> dict | None:
    """train_loop_config as train.params when the config holds it as it is (YAML's types), else None."""
    try:
        loaded = load_config(None, {"train.params": dict(config)}).train.params
    except (ConfigError, ValueError, TypeError):
        return None
    return loaded if loaded == dict(config) else None


def ray_result(result) -> Result:
    """raytf's Result as Ray Train's: the newest committed checkpoint and rank 0's reports."""
    import pandas as pd
    from ray.train import Checkpoint

    from raytf import _storage as storage
    from raytf._core.metrics import BASE_COLUMNS
    from raytf.api.result import _run_dir_of

    df = result.metrics
    reports: list[tuple[int, int, dict]] = []
    if not df.empty:
        rows = df[(df["kind"] == "epoch") & (df["rank"] == 0)].sort_values(["attempt", "epoch", "time"])
        names = [c for c in rows.columns if c not in BASE_COLUMNS]
        for row in rows.to_dict("records"):
            metrics = {_name(k): row[k] for k in names if pd.notna(row[k])}
            reports.append((int(row["epoch"]), int(row["step"]), metrics))
    by_point = {(epoch, step): metrics for epoch, step, metrics in reports}  # (the latest attempt's wins)
    rd = _run_dir_of(result.run_dir, result.storage)
    best = [(Checkpoint(rd.path(storage.CHECKPOINTS_DIR, e.dir), rd.fs), by_point.get((e.epoch, e.step), {}))
            for e in rd.checkpoints.list() if e.committed]
    error = None
    if result.error is not None:
        e = result.error
        workers = {w.rank: w for w in e.failures.values() if w.role == "worker"}
        error = TrainingFailedError(f"{e}\n{e.remote_traceback}".rstrip(), workers, failures=e.failures,
                                    result=result)
        result.error = error
    return Result(
        metrics=best[-1][1] if best and best[-1][1] else (reports[-1][2] if reports else None),
        checkpoint=best[-1][0] if best else None, error=error, path=result.run_dir,
        metrics_dataframe=pd.DataFrame([m for _, _, m in reports]) if reports else None,
        best_checkpoints=best, _storage_filesystem=rd.fs, raytf=result)


def _name(column: str) -> str:
    """A metric's name as the loop reported it (metrics.parquet prefixes the few that clash with its columns)."""
    from raytf._core.metrics import BASE_COLUMNS

    base = column.removeprefix("metric_")
    return base if column.startswith("metric_") and base in BASE_COLUMNS else column
