"""The Keras callbacks: RaytfCallback behind TrainContext.keras_callbacks() (one path with custom loops), and
ScriptCallback, which script mode adds to every Model.fit of an unmodified script."""

from __future__ import annotations

import logging
from collections.abc import Mapping

import tensorflow as tf

from raytf._core import events as ev
from raytf._core import private_apis as apis
from raytf._core.progress import scalar

log = logging.getLogger(__name__)


class RaytfCallback(tf.keras.callbacks.Callback):
    _skip = 0  # steps of the first epoch the checkpoint already holds (a mid-epoch resume)
    # A training function's fit resumes mid-epoch through tf-keras's private counters hook (on_train_begin): made
    # before fit, the callback refuses a tf-keras without it (PrivateApiMissing, a configuration failure), never
    # mid-run. A script's own fit resumes as the script says (ScriptCallback).
    _exact_resume = True

    def __init__(self, ctx) -> None:
        super().__init__()
        if self._exact_resume:
            apis.require(apis.KERAS_RESUME)
        self.ctx = ctx
        # Receive logs as tensors: reading them forces a device sync, so the context only converts
        # them on the steps it actually reports. (tf-keras's private flag: without it, numpy logs, as before.)
        if apis.available(apis.TENSOR_LOGS, log.warning):
            self._supports_tf_logs = True

    def _set_scale(self) -> None:
        self._scale = log_scale(self.model, self.ctx.num_replicas)

    def on_train_begin(self, logs=None) -> None:
        self._set_scale()
        self._skip = 0
        ctx = self.ctx
        ctx.fit = (ctx.fit or 0) + 1
        if ctx.fit > 1:
            # A later Model.fit of the same program (fine-tuning, say): its epochs count on from the earlier
            # fits', so its rows and checkpoints are not taken for theirs; the resume was the first fit's.
            ctx._emit(ev.STARTED, ev.Started(replicas=ctx.num_replicas, epochs=self.params.get("epochs"),
                                             steps_per_epoch=self.params.get("steps"), fit=ctx.fit,
                                             base_epoch=ctx.epoch, base_step=ctx.step))
            return
        ctx.epoch = ctx.initial_epoch
        if _is_keras3(self.model):
            # Keras 3's fit asks nothing at its start: the resumed epoch's saved steps are skipped by its epoch
            # iterator instead (raytf issue 72; _task/keras3.py), unless the program's own BackupAndRestore has
            # decided where fit starts (model._initial_epoch, set by its on_train_begin before this one's).
            if getattr(self.model, "_initial_epoch", None) is not None:
                return
            _, done = _ResumeMidEpoch(self).maybe_load_initial_counters_from_ckpt(self.params.get("steps"),
                                                                                 ctx.initial_epoch)
            if done:
                from raytf._task import keras3

                keras3.resume_mid_epoch(done)
        elif getattr(self.model, "_training_state", None) is None:
            # Right after on_train_begin, tf-keras's fit asks model._training_state at which (epoch, step) to
            # start: its own BackupAndRestore resumes mid-epoch that way (tf_keras/src/engine/training.py,
            # Model._maybe_load_initial_counters_from_ckpt). Without it, fit restarts the checkpoint's epoch
            # from its first step and trains that epoch's saved steps twice (raytf issue 17).
            self.model._training_state = _ResumeMidEpoch(self)
        else:  # the user's own BackupAndRestore decides; line the step counter up with the epoch's start
            spe = self.ctx.steps_per_epoch
            if spe:
                self.ctx.step = self.ctx.initial_epoch * spe

    def on_train_end(self, logs=None) -> None:
        if isinstance(getattr(self.model, "_training_state", None), _ResumeMidEpoch):
            self.model._training_state = None

    def on_epoch_begin(self, epoch, logs=None) -> None:
        self._last_batch = self._skip - 1  # Keras numbers a resumed epoch's batches from where it resumes
        self._skip = 0

    def on_train_batch_end(self, batch, logs=None) -> None:
        # With steps_per_execution > 1 Keras calls this once per group, with the group's last index.
        steps, self._last_batch = batch - self._last_batch, batch
        self.ctx.step_end(_LazyScaled(logs, self._scale), steps=steps)

    def on_test_batch_end(self, batch, logs=None) -> None:
        self.ctx.heartbeat()  # validation is progress too

    def on_epoch_end(self, epoch, logs=None) -> None:
        self.ctx.epoch_end(logs)


def appended(callbacks, callback, unless: type | None = None):
    """`callbacks` as a fit takes them (None, a list, or either Keras's CallbackList) with `callback` last, unless
    one of type `unless` is there already: raytf's callback in a script's fit (script/patches.py) and a Ray Train
    loop's (raytrain_keras.py), tf-keras's or Keras 3's."""
    listed = callbacks.callbacks if hasattr(callbacks, "callbacks") and hasattr(callbacks, "append") else None
    if listed is None:
        callbacks = list(callbacks or [])
    if unless is None or not any(isinstance(c, unless) for c in (listed if listed is not None else callbacks)):
        callbacks.append(callback)
    return callbacks


def log_scale(model, replicas: int) -> float:
    """What a fit's batch logs are multiplied by so that step rows show per-replica means, as the epoch rows do.
    Under a multi-replica strategy tf-keras sums the replicas' batch logs ("auto" reduction means "sum" off TPU);
    Keras 3's "auto" is the mean (keras/src/backend/tensorflow/trainer.py, reduce_per_replica), as is raytf's
    correction of it under MWMS."""
    method = getattr(model, "distribute_reduction_method", None) or "auto"
    summed = method == "sum" or (method == "auto" and not _is_keras3(model))
    return 1.0 / replicas if summed else 1.0


def _is_keras3(model) -> bool:
    """A Keras 3 model (`import keras`), not tf-keras's: its fit is Keras 3's."""
    return type(model).__module__.split(".", 1)[0] == "keras" or any(
        c.__module__.split(".", 1)[0] == "keras" for c in type(model).__mro__)


class ScriptCallback(RaytfCallback):
    """Script mode: added last to the callbacks of every `Model.fit`, so it sees each epoch after the
    script's own callbacks (a ModelCheckpoint has written its file when the epoch's sync runs). Learns the
    replica count, epochs and steps from the fit itself; `ctx` is a script.reporter.ScriptReporter."""

    _exact_resume = False

    def on_train_begin(self, logs=None) -> None:
        self.ctx.fit_started(replicas=int(self.model.distribute_strategy.num_replicas_in_sync),
                             epochs=self.params.get("epochs"), steps_per_epoch=self.params.get("steps"))
        self._set_scale()

    def on_epoch_begin(self, epoch, logs=None) -> None:
        super().on_epoch_begin(epoch, logs)
        self.ctx.epoch_begin(epoch)


class _ResumeMidEpoch:
    """What tf-keras's fit asks at its start (the interface of tf_keras's WorkerTrainingState): resume at the
    checkpoint's step within its epoch, so the optimizer's iterations end where an uninterrupted run's do."""

    def __init__(self, callback: RaytfCallback) -> None:
        self.callback = callback

    def maybe_load_initial_counters_from_ckpt(self, steps_per_epoch, initial_epoch, mode=None):
        ctx = self.callback.ctx
        done = ctx.initial_step - initial_epoch * steps_per_epoch if steps_per_epoch else 0
        if 0 < done < (steps_per_epoch or 0):
            self.callback._skip = done
            ctx.step = ctx.initial_step
            return initial_epoch, done
        if steps_per_epoch:
            ctx.step = initial_epoch * steps_per_epoch
        return initial_epoch, 0


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
