"""A Ray Train loop's Keras `Model.fit` steps, counted by raytf as a training function's are (raytf.compat): step
rows with the step-time breakdown, heartbeats for the hang watch, the replica count. Its epochs are its
`ray.train.report` calls (raytrain), not counted here. Imported in a task's process only (TensorFlow)."""

from __future__ import annotations

import contextlib
import functools
import inspect
from collections.abc import Iterator

from raytf._core import events as ev
from raytf._task.keras_callback import RaytfCallback, appended, log_scale


class RayTrainSteps(RaytfCallback):
    """Added last to every Model.fit of a Ray Train loop. The fit's replicas are its model's strategy's (the loop
    builds its own); it leaves the epoch count, the resume and checkpoints to the loop."""

    def __init__(self, ctx, announced: list[int]) -> None:
        super().__init__(ctx)
        self._announced = announced  # the replica count told to the driver (once per task)

    def on_train_begin(self, logs=None) -> None:
        replicas = int(self.model.distribute_strategy.num_replicas_in_sync)
        self._scale = log_scale(self.model, replicas)
        self._skip = 0
        if replicas not in self._announced:
            self._announced.append(replicas)
            self.ctx._emit(ev.STARTED, ev.Started(replicas=replicas))

    def on_train_end(self, logs=None) -> None:
        pass

    def on_epoch_end(self, epoch, logs=None) -> None:
        self.ctx.heartbeat()  # (the loop's report is the epoch row)


@contextlib.contextmanager
def steps_reported(ctx) -> Iterator[None]:
    """While the block runs, every tf-keras Model.fit gets RayTrainSteps(ctx) last among its callbacks, and so does
    every Keras 3 fit (_task/keras3.py's hook)."""
    import tf_keras

    from raytf._task import keras3

    model_cls = tf_keras.Model
    original = model_cls.fit
    signature = inspect.signature(original)
    announced: list[int] = []

    def add(callbacks):
        return appended(callbacks, RayTrainSteps(ctx, announced))

    @functools.wraps(original)
    def fit(self, *args, **kwargs):
        bound = signature.bind(self, *args, **kwargs)
        bound.arguments["callbacks"] = add(bound.arguments.get("callbacks"))
        return original(*bound.args, **bound.kwargs)

    model_cls.fit = fit
    try:
        with keras3.callbacks_added(add):
            yield
    finally:
        model_cls.fit = original
