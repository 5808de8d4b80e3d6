"""The Keras callbacks: RaytfCallback behind TrainContext.keras_callbacks() (one path with custom loops), and
ScriptCallback, which script mode adds to every Model.fit of an unmodified script."""

from __future__ import annotations

from collections.abc import Mapping

import tensorflow as tf

from raytf._core.progress import scalar


class RaytfCallback(tf.keras.callbacks.Callback):
    def __init__(self, ctx) -> None:
        super().__init__()
        self.ctx = ctx
        # Receive logs as tensors: reading them forces a device sync, so the context only converts
        # them on the steps it actually reports.
        self._supports_tf_logs = True

    def _set_scale(self) -> None:
        # Under a multi-replica strategy Keras sums the replicas' batch logs ("auto" reduction means
        # "sum" off TPU); divide so step rows show per-replica means like the epoch rows do.
        method = getattr(self.model, "distribute_reduction_method", None) or "auto"
        self._scale = 1.0 / self.ctx.num_replicas if method in ("auto", "sum") else 1.0

    def on_train_begin(self, logs=None) -> None:
        self._set_scale()
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

    def on_test_batch_end(self, batch, logs=None) -> None:
        self.ctx.heartbeat()  # validation is progress too

    def on_epoch_end(self, epoch, logs=None) -> None:
        self.ctx.epoch_end(logs)


class ScriptCallback(RaytfCallback):
    """Script mode: added last to the callbacks of every `Model.fit`, so it sees each epoch after the
    script's own callbacks (a ModelCheckpoint has written its file when the epoch's sync runs). Learns the
    replica count, epochs and steps from the fit itself; `ctx` is a script.reporter.ScriptReporter."""

    def on_train_begin(self, logs=None) -> None:
        self.ctx.fit_started(replicas=int(self.model.distribute_strategy.num_replicas_in_sync),
                             epochs=self.params.get("epochs"), steps_per_epoch=self.params.get("steps"))
        self._set_scale()

    def on_epoch_begin(self, epoch, logs=None) -> None:
        super().on_epoch_begin(epoch, logs)
        self.ctx.epoch_begin(epoch)


class _LazyScaled(Mapping):
    """Batch logs read (and scaled) only when the context reports them. Under ParameterServerStrategy the
    logs are one RemoteValue of a dict: fetching it waits for that step's closure, so only do it then."""

    def __init__(self, logs, scale: float) -> None:
        self._logs = logs if logs is not None else {}
        self._s = scale
        self._read = None

    def _values(self) -> dict:
        if self._read is None:
            logs = self._logs.fetch() if hasattr(self._logs, "fetch") else self._logs
            self._read = {}
            for k, v in logs.items():
                f = scalar(v)
                if f is not None:
                    self._read[k] = f * self._s
        return self._read

    def __getitem__(self, key):
        return self._values()[key]

    def __iter__(self):
        return iter(self._values())

    def __len__(self) -> int:
        return len(self._values())
