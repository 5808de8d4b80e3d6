"""TrainContext: what a user's training function receives on every task."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any

from raytf._core import checkpoints, data
from raytf._core.events import STEP
from raytf._core.progress import StepCounter, misused_report
from raytf._storage import RunDir
from raytf._task import report as reporting
from raytf._task.checkpointing import Checkpointing
from raytf._task.control import ControlListener, TrainingStopped  # noqa: F401 (TrainingStopped: the task's)
from raytf.config import Config


class TrainContext(Checkpointing, StepCounter):
    """Handed to the training function: the strategy, the run's settings, and the hooks that report
    metrics and write checkpoints.

    A training function looks like::

        def train(ctx: raytf.TrainContext):
            with ctx.strategy.scope():
                model = build_and_compile()
            ctx.restore(model=model, optimizer=model.optimizer)
            model.fit(dataset, epochs=ctx.epochs, initial_epoch=ctx.initial_epoch,
                      steps_per_epoch=ctx.steps_per_epoch, callbacks=ctx.keras_callbacks())

    or, for a custom loop, calls `ctx.step_end(...)` after each step and `ctx.epoch_end(...)` after
    each epoch, iterating `for epoch in ctx.epoch_range()`. `ctx.epoch` and `ctx.step` count the epochs
    and global steps completed (a StepCounter: `report` and `heartbeat` come from there). `restore`, `save`,
    `commit`, `download_resumed`, `finish` and `watch_checkpoints` are its checkpoint side (checkpointing.py).
    """

    def __init__(
        self,
        *,
        cfg: Config,
        strategy: Any,
        role: str,
        index: int,
        rank: int,
        is_chief: bool,
        num_workers: int,
        attempt: int,
        run_dir: RunDir,
        emit: Callable[[str, dict], None],
        resume_from: checkpoints.CheckpointEntry | None,
        scratch_dir: str,
        wait_stop: Callable[[float], bool] | None = None,
        bus=None,
        max_workers: int | None = None,
        datasets: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(emit, every_steps=cfg.metrics.every_steps, heartbeat_s=cfg.failure.heartbeat_s,
                         epoch=resume_from.epoch if resume_from else 0, step=resume_from.step if resume_from else 0,
                         max_names=cfg.metrics.max_names)
        self.cfg = cfg
        self.strategy = strategy
        self.role = role
        self.index = index
        self.rank = rank
        self.is_chief = is_chief
        self._num_workers = num_workers
        self._max_workers = max_workers or num_workers
        self.attempt = attempt
        self._run_dir = run_dir
        self._resume_from = resume_from
        self._scratch = scratch_dir
        self._wait_stop = wait_stop or (lambda timeout: False)
        self._coordinator = None
        self._datasets = dict(datasets or {})  # name -> ray.data.DataIterator: this task's share (Ray Data input)
        self._control = None
        if bus is not None and role != "evaluator":
            self._control = ControlListener(bus, rank, self)
            self._control.start()
        reporting.set_sink(self)  # raytf.report(...) in the training function lands here

    # -- the run's settings ------------------------------------------------------------------
    @property
    def params(self) -> dict[str, Any]:
        """`train.params` from the config, untouched."""
        return self.cfg.train.params

    @property
    def epochs(self) -> int:
        return self.cfg.train.epochs

    @property
    def steps_per_epoch(self) -> int | None:
        return self.cfg.train.steps_per_epoch

    @property
    def num_workers(self) -> int:
        """The workers of this attempt's cluster (TF_CONFIG's `worker` tasks; 1 without a cluster). Elastic
        training (cluster.min_workers below cluster.num_workers) may run an attempt with fewer, while hosts are
        lost: it is the attempt's size, between cluster.min_workers and `max_workers`."""
        return self._num_workers

    @property
    def max_workers(self) -> int:
        """The size wanted: the run's cluster.num_workers, which `num_workers` equals unless elastic training
        runs this attempt smaller (`ctx.num_workers / ctx.max_workers` scales what follows the size)."""
        return self._max_workers

    @property
    def batch_size(self) -> int:
        """Per-replica batch size: train.batch_size; with cluster.elastic.keep_global_batch, the full size's
        global batch split over this attempt's replicas (larger when it runs with fewer workers)."""
        return self.cfg.train.batch_size

    @property
    def num_replicas(self) -> int:
        """Replicas in sync in this attempt's strategy (MWMS: every worker's devices)."""
        return int(self.strategy.num_replicas_in_sync)

    @property
    def global_batch_size(self) -> int:
        """batch_size * num_replicas, the attempt's: elastic training with fewer workers trains a smaller global
        batch, unless cluster.elastic.keep_global_batch keeps it (then batch_size grows instead)."""
        return self.batch_size * self.num_replicas

    @property
    def coordinator(self):
        """ParameterServerStrategy only: the ClusterCoordinator that schedules functions on the workers
        (the same one Keras' model.fit uses)."""
        if self._coordinator is None:
            from raytf._task import tf_runtime

            self._coordinator = tf_runtime.coordinator(self.strategy)
        return self._coordinator

    @property
    def seed(self) -> int:
        return self.cfg.train.seed

    @property
    def run_dir(self) -> str:
        """URI of the run directory on shared storage."""
        return self._run_dir.uri

    @property
    def log_dir(self) -> str:
        """A local directory of this task's own for the program's logs (a Keras TensorBoard callback, say); what
        is in it when the function ends goes to <run>/logs/<role><index>-attempt<N>/. Script mode: $RAYTF_LOG_DIR."""
        path = os.path.join(self._scratch, "logs")
        os.makedirs(path, exist_ok=True)
        return path

    @property
    def scratch_dir(self) -> str:
        """A local directory of this task's own for this attempt, removed when the task's call ends."""
        return self._scratch

    @property
    def initial_epoch(self) -> int:
        """Epochs already trained by a previous attempt or launch (pass to `model.fit`)."""
        return self._resume_from.epoch if self._resume_from else 0

    @property
    def initial_step(self) -> int:
        return self._resume_from.step if self._resume_from else 0

    def epoch_range(self) -> range:
        """The epochs still to train: range(initial_epoch, epochs)."""
        return range(self.initial_epoch, self.epochs)

    # -- Ray Data input ------------------------------------------------------------------------
    def dataset_shard(self, name: str):
        """This task's share of the run's dataset `name` (raytf.fit's datasets=, or train.datasets), as Ray Data's
        DataIterator (iter_batches, iter_tf_batches, to_tf): an MWMS worker's equal share; the evaluator's (and a
        single-task strategy's) whole dataset. Each iteration is one epoch of it."""
        if name not in self._datasets:
            raise data.DatasetNotGiven(data.missing(name, self._datasets))
        return self._datasets[name]

    def dataset(self, name: str, feature_columns: str | list[str], label_columns: str | list[str], *,
                batch_size: int | None = None, **to_tf: Any):
        """This task's share of the dataset `name` as a tf.data.Dataset of (features, labels), ready for
        `model.fit` (leave steps_per_epoch out: an epoch is the whole share, the same on every worker) or
        `strategy.experimental_distribute_dataset`.

        `batch_size` is per replica (default: ctx.batch_size). Each element holds batch_size *
        num_replicas_in_sync rows, the global batch that tf.distribute splits among the replicas; TF's
        auto-sharding is off (the rows are shared out already), so each worker's replicas read every row of its
        share once an epoch, batch_size rows per replica per step. Every new iteration (Keras: each epoch) reads
        the share again, and every worker must iterate as often as the others (Ray Data starts a pass of a split
        dataset once every worker asked for it). Other keywords go to Ray's DataIterator.to_tf (drop_last,
        local_shuffle_buffer_size, prefetch_batches, feature_type_spec, ...)."""
        from raytf._task import tf_runtime

        per_replica = self.batch_size if batch_size is None else int(batch_size)
        return tf_runtime.unsharded(self.dataset_shard(name).to_tf(
            feature_columns, label_columns, batch_size=data.global_batch(per_replica, self.num_replicas), **to_tf))

    # -- the tf.data service -------------------------------------------------------------------
    def data_service(self, ds):
        """`ds`, the training function's own tf.data pipeline, read through the run's tf.data service: the pipeline up
        to this call runs in the service's workers (data_service.workers CPU actors, anywhere in the cluster), what
        follows it runs here. Returns `ds` as it is when the run has no service. See raytf.data_service."""
        from raytf._task import dataservice

        return dataservice.distribute(ds, self)

    # -- progress (report and heartbeat: StepCounter) -----------------------------------------
    def step_end(self, metrics: Mapping[str, Any] | None = None, *, steps: int = 1) -> None:
        """Call after every training step (or every `steps` steps): counts them, reports every
        metrics.every_steps steps (values may be tensors: they are only read when reported) and
        writes step checkpoints when due."""
        before = self.step
        super().step_end(metrics, steps=steps)
        if self._checkpointing() and checkpoints.crossed(before, self.step, self.cfg.checkpoint.every_steps):
            self.save()
        if self._control is not None and self._control.pending:
            self._control.follow(self, save=self.save if self._writer is not None else None)

    def report(self, metrics: Mapping[str, Any] | None = None, *args: Any, kind: str = STEP, **unexpected: Any) -> None:
        """Send a metrics row now, at the context's epoch and step: `ctx.report({"val_loss": 0.4})`, or
        `kind="eval"` for an evaluation's."""
        if args or unexpected:  # (said as the user's call reads: TrainContext.report, not the class it inherits)
            raise TypeError(misused_report(args, list(unexpected)))
        super().report(metrics, kind=kind)

    def report_explicit(self, metrics: Mapping[str, Any] | None, *, step: int | None, epoch: int | None,
                        kind: str, checkpoint: bool) -> None:
        """`raytf.report(...)` in a training function: a row at the context's own count."""
        if step is not None or epoch is not None or checkpoint:
            raise ValueError("raytf.report: step=, epoch= and checkpoint= are for scripts (train.script); in a "
                             "training function the context counts steps (ctx.step_end) and saves (ctx.save())")
        self.report(metrics or {}, kind=kind)

    def epoch_end(self, metrics: Mapping[str, Any] | None = None) -> None:
        """Call after every epoch: reports the epoch's metrics and writes the epoch checkpoint when due
        (and always after the last epoch)."""
        super().epoch_end(metrics)
        last = self.epoch >= self.epochs
        if self._checkpointing() and (checkpoints.is_due(self.epoch, self.cfg.checkpoint.every_epochs) or last):
            self.save()

    def close(self) -> None:
        reporting.set_sink(None)
        if self._control is not None:
            self._control.close()
        if self._uploader is not None:
            self._uploader.abandon()

    def keras_callbacks(self) -> list:
        """Callbacks for `model.fit` that report metrics and checkpoint like step_end/epoch_end."""
        from raytf._task import keras_callback

        return [keras_callback.RaytfCallback(self)]
