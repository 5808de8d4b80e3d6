"""The Keras callback behind TrainContext.keras_callbacks(): one path with custom loops."""

from __future__ import annotations

import tensorflow as tf


class RaytfCallback(tf.keras.callbacks.Callback):
    def __init__(self, ctx) -> None:
        super().__init__()
        self.ctx = ctx
        # Receive logs as tensors: reading them forces a device sync, so the context only converts
        # them on the steps it actually reports.
        self._supports_tf_logs = True

    def on_train_begin(self, logs=None) -> None:
        # Under a multi-replica strategy Keras sums the replicas' batch logs ("auto" reduction means
        # "sum" off TPU); divide so step rows show per-replica means like the epoch rows do.
        method = getattr(self.model, "distribute_reduction_method", None) or "auto"
        self._scale = 1.0 / self.ctx.num_replicas if method in ("auto", "sum") else 1.0
        # Keras restarts a resumed run at the beginning of initial_epoch; line the step counter up
        # with that (a mid-epoch checkpoint's extra steps are trained again).
        spe = self.ctx.steps_per_epoch
        if spe:
            self.ctx.step = self.ctx.initial_epoch * spe
        self.ctx.epoch = self.ctx.initial_epoch

    def on_epoch_begin(self, epoch, logs=None) -> None:
        self._last_batch = -1

    def on_train_batch_end(self, batch, logs=None) -> None:
        # With steps_per_execution > 1 Keras calls this once per group, with the group's last index.
        steps, self._last_batch = batch - self._last_batch, batch
        self.ctx.step_end(_LazyScaled(logs, self._scale), steps=steps)

    def on_epoch_end(self, epoch, logs=None) -> None:
        self.ctx.epoch_end(logs)


class _LazyScaled(dict):
    """Batch logs scaled on read only: the context converts them on reporting steps alone."""

    def __init__(self, logs, scale: float) -> None:
        super().__init__(logs or {})
        self._s = scale

    def items(self):
        return ((k, v * self._s) for k, v in super().items())
