"""A Ray Train `train_loop_per_worker` inside a raytf task (raytf.compat.TensorflowTrainer, train.ray_train): Ray
Train's public functions called by the loop reach the task's TrainContext.

- `ray.train.report(metrics, checkpoint=...)`: an epoch row of this rank's metrics (every rank's, in
  metrics.parquet: an epoch is a report); rank 0's checkpoint directory is copied at once (the caller may delete
  it when report returns, as Ray's Keras callbacks do) and committed as the run's next checkpoint, with raytf's
  manifest, in the background. Other ranks' checkpoints are dropped (Ray Train merges every rank's files).
- `ray.train.get_checkpoint()`: the checkpoint this attempt resumes from (the run's newest committed one: a retry,
  or a relaunch with the same RunConfig(name=...)), downloaded into the task's scratch, as a ray.train.Checkpoint.
- `ray.train.get_context()`: world rank and size, local rank and size and node rank (workers sharing a host are a
  node), the experiment name (run.name).
- `ray.train.get_dataset_shard(name)`: this worker's equal share of the dataset `name` (ctx.dataset_shard).
- Ray's Keras `ReportCheckpointCallback` (ray.air.integrations.keras, ray.train.tensorflow.keras) calls report.
- Every Keras Model.fit of the loop also reports its steps to raytf (step rows, the step-time breakdown,
  heartbeats for the hang watch), as a training function's do (raytrain_keras).

The same with RAY_TRAIN_V2_ENABLED=0 (Ray Train v1's functions and get_context()'s TrainContext): RaytfV1Session
answers what they read of v1's session, through the same bridge. Its Tune trial (get_trial_name, _id, _dir,
_resources) and get_storage() raise NotMapped; get_metadata() is {} (raytf.compat refuses metadata=).

Not mapped (a NotMapped error, never retried): get_all_reported_checkpoints, ray.train.collective's barrier and
broadcast_from_rank_zero, report's checkpoint_upload_fn and validation; ignored: report's checkpoint_dir_name and
checkpoint_upload_mode (raytf names its checkpoints and always uploads beside training). get_preemption_info is
always None: a preempted task's peers save at one agreed step without the loop asking.

Ray Train's private seams this needs are in ray_train_private.
"""

from __future__ import annotations

import copy
import inspect
import json
import os
import shutil
import tempfile
from collections.abc import Callable
from typing import Any

from ray.train.v2.api.context import TrainContext as RayTrainContext

from raytf._core import checkpoints
from raytf._core.failure import CONFIG
from raytf._core.raytrain import StartingFrom, local_ranks
from raytf._task import ray_train_private
from raytf.errors import RaytfError


class NotMapped(RaytfError, NotImplementedError):
    """A Ray Train function raytf.compat does not map (a configuration error: never retried)."""

    failure_kind = CONFIG

    def __init__(self, what: str, fix: str) -> None:
        super().__init__(f"raytf.compat: {what} is not mapped to raytf. Fix: {fix} (docs/ray-train.md)")


def no_strategy_yet():
    """The TrainContext's strategy while the loop has not built its own: TF's default (one replica)."""
    import tensorflow as tf

    return tf.distribute.get_strategy()


def call_loop(fn: Callable[..., Any], config: dict[str, Any]) -> Any:
    """Call a train_loop_per_worker as Ray Train does: with its config when it takes one argument, with none when it
    takes none."""
    try:
        params = len(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        params = 1
    if params > 1:
        raise ValueError(f"train_loop_per_worker ({getattr(fn, '__qualname__', fn)}) takes {params} arguments: Ray "
                         "Train calls it with its config, or with none")
    return fn(config) if params == 1 else fn()


def loop(fn: Callable[..., Any]) -> Callable[[Any], None]:
    """The training function raytf runs for a Ray Train loop: the bridge installed, the loop called with
    train.params as its config, its Keras fits' steps counted. A StartingFrom (v1's resume_from_checkpoint=) gives
    the bridge the checkpoint get_checkpoint() returns while the run has none of its own."""
    start = None
    if isinstance(fn, StartingFrom):
        fn, start = fn.loop, fn.checkpoint

    def run(ctx) -> None:
        from raytf._task import raytrain_keras

        utils = bridge(ctx, start)
        with ray_train_private.installed(utils, RaytfV1Session(utils)), raytrain_keras.steps_reported(ctx):
            call_loop(fn, copy.deepcopy(dict(ctx.params)))

    return run


class RaytfRayTrainContext(RayTrainContext):
    """What `ray.train.get_context()` returns in a raytf task."""

    def __init__(self, *, name: str, rank: int, size: int, local: tuple[int, int, int]) -> None:
        self._name, self._rank, self._size = name, rank, size
        self._local_rank, self._local_size, self._node_rank = local

    def get_experiment_name(self) -> str:
        return self._name

    def get_world_size(self) -> int:
        return self._size

    def get_world_rank(self) -> int:
        return self._rank

    def get_local_rank(self) -> int:
        return self._local_rank

    def get_local_world_size(self) -> int:
        return self._local_size

    def get_node_rank(self) -> int:
        return self._node_rank

    def get_storage(self):
        raise NotMapped("ray.train.get_context().get_storage() (Ray Train's StorageContext)",
                        "ray.train.report(checkpoint=...) commits checkpoints to the run directory; other files: "
                        "write them under the working directory (uploaded to <run>/workdir/)")


def _context_of(ctx) -> RaytfRayTrainContext:
    spec = json.loads(os.environ.get("TF_CONFIG") or "{}")
    workers = list(spec.get("cluster", {}).get("worker", []))
    index = int(spec.get("task", {}).get("index", 0))
    local = local_ranks(workers, index) if workers else (0, 1, 0)
    return RaytfRayTrainContext(name=ctx.cfg.run.name or "", rank=ctx.rank, size=ctx.num_workers, local=local)


class _Bridge:
    """raytf's implementation of Ray Train's TrainFnUtils for one task (the methods ray.train's functions call)."""

    def __init__(self, ctx, start: Any = None) -> None:
        self.ctx = ctx
        self.context = _context_of(ctx)
        self._resumed: Any = None  # ray.train.Checkpoint of the resumed checkpoint, once downloaded
        self._start = start  # v1's resume_from_checkpoint: returned while the run has committed none

    def report(self, metrics: dict[str, Any], checkpoint=None, checkpoint_dir_name=None, checkpoint_upload_mode=None,
               delete_local_checkpoint_after_upload=None, checkpoint_upload_fn=None, validation=False) -> None:
        if checkpoint_upload_fn is not None:
            raise NotMapped("ray.train.report(checkpoint_upload_fn=...)", "leave it out: raytf uploads the "
                            "checkpoint directory to the run directory itself")
        if validation:
            raise NotMapped("ray.train.report(validation=...)", "validate in the loop and report the metrics, or "
                            "run raytf's side-car evaluator")
        ctx = self.ctx
        ctx.epoch_end(metrics)  # a report is an epoch row: the run's progress, metrics.parquet, TensorBoard
        if checkpoint is None or not ctx.is_chief:
            return
        # Copied now: Ray's Keras callbacks delete the directory as soon as report returns.
        local = tempfile.mkdtemp(prefix=f"{checkpoints.checkpoint_name(ctx.epoch, ctx.step)}-", dir=ctx.scratch_dir)
        checkpoint.to_directory(local)
        ctx.commit(local)
        if delete_local_checkpoint_after_upload and os.path.isdir(checkpoint.path):
            shutil.rmtree(checkpoint.path, ignore_errors=True)

    def get_checkpoint(self):
        if self._resumed is None:
            local = self.ctx.download_resumed(os.path.join(self.ctx.scratch_dir, "ray-train-resume"))
            if local is None:
                return self._start
            from ray.train import Checkpoint

            self._resumed = Checkpoint.from_directory(local)
        return self._resumed

    def get_all_reported_checkpoints(self, consistency_mode=None, timeout_s=None):
        raise NotMapped("ray.train.get_all_reported_checkpoints()", "the run's committed checkpoints are listed, "
                        "after the run, in trainer.fit()'s Result.best_checkpoints")

    def get_dataset_shard(self, dataset_info):
        return self.shard(dataset_info.dataset_name)

    def shard(self, name: str | None):
        return self.ctx.dataset_shard(name)

    def get_context(self) -> RaytfRayTrainContext:
        return self.context

    def get_preemption_info(self):
        return None  # a preemption notice makes every task save at one agreed step and stop; nothing to ask

    def is_distributed(self) -> bool:
        return True

    def barrier(self) -> None:
        raise NotMapped("ray.train.collective.barrier()", "synchronise through the strategy (a collective op, or "
                        "strategy.reduce of a value every worker computes)")

    def broadcast_from_rank_zero(self, data: Any) -> Any:
        raise NotMapped("ray.train.collective.broadcast_from_rank_zero()", "pass the value in train_loop_config, "
                        "or compute it on every worker")


def _context_says(getter: str) -> property:
    """A session attribute answered by the bridge's RaytfRayTrainContext's `getter`."""
    return property(lambda session: getattr(session._bridge.context, getter)())


class RaytfV1Session:
    """What Ray Train v1's public functions read of `ray.train._internal.session._session` (its _TrainSession) in a
    raytf task, each answered by the task's bridge."""

    def __init__(self, bridge: _Bridge) -> None:
        self._bridge = bridge

    @property
    def metadata(self) -> dict:
        return {}  # v1's default: raytf.compat refuses TensorflowTrainer(metadata=...)

    def report(self, metrics: dict[str, Any], checkpoint=None) -> None:
        self._bridge.report(metrics, checkpoint=checkpoint)

    @property
    def loaded_checkpoint(self):
        return self._bridge.get_checkpoint()

    def get_dataset_shard(self, dataset_name: str | None = None):
        return self._bridge.shard(dataset_name)

    # What v1's get_context() reads, the bridge's context's answers (world_rank is never None: v1's functions take
    # a session without one for Ray Tune's). storage: NotMapped, as v2's get_storage().
    world_rank = _context_says("get_world_rank")
    world_size = _context_says("get_world_size")
    local_rank = _context_says("get_local_rank")
    local_world_size = _context_says("get_local_world_size")
    node_rank = _context_says("get_node_rank")
    experiment_name = _context_says("get_experiment_name")
    storage = _context_says("get_storage")

    @property
    def trial_name(self):
        raise _no_trial()

    trial_id = run_id = trial_dir = trial_resources = trial_name


def _no_trial() -> NotMapped:
    return NotMapped("ray.train.get_context()'s Ray Tune trial (get_trial_name, _id, _dir, _resources: deprecated by "
                     "Ray Train too)", "get_context().get_experiment_name() is the run's name; write files under "
                     "the working directory (uploaded to <run>/workdir/)")


_bridge_class: type | None = None


def bridge(ctx, start: Any = None):
    """A TrainFnUtils (Ray's abstract class, from ray_train_private) implemented by _Bridge, for `ctx` (`start`:
    v1's resume_from_checkpoint)."""
    global _bridge_class
    if _bridge_class is None:
        _bridge_class = type("RaytfTrainFnUtils", (_Bridge, ray_train_private.base_class()), {})
    return _bridge_class(ctx, start)
