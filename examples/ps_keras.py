"""ParameterServerStrategy with Keras model.fit: the chief coordinates, workers compute, ps hold variables.

Run: python -m raytf.launch conf/ps_local.yaml
"""

from __future__ import annotations

import tensorflow as tf

import raytf
from examples.data import digits, synthetic
from examples.keras_cnn import build_model


def train(ctx: raytf.TrainContext) -> None:
    p = ctx.params
    tf.keras.utils.set_random_seed(ctx.seed)
    data = synthetic if p.get("data") == "synthetic" else digits
    (x, y), _ = data(seed=ctx.seed)
    batch = ctx.global_batch_size  # per worker step: each worker trains on whole batches

    def dataset_fn(input_context: tf.distribute.InputContext) -> tf.data.Dataset:
        # Runs on each worker: shard by input pipeline so workers see different examples.
        ds = tf.data.Dataset.from_tensor_slices((x, y)).shard(
            input_context.num_input_pipelines, input_context.input_pipeline_id)
        return ds.shuffle(len(x), seed=ctx.seed).repeat().batch(batch, drop_remainder=True).prefetch(2)

    with ctx.strategy.scope():
        model = build_model(float(p.get("learning_rate", 0.01)))
    if "steps_per_execution" in p:
        model.compile(optimizer=model.optimizer, loss=model.loss, metrics=["accuracy"],
                      steps_per_execution=int(p["steps_per_execution"]))
    ctx.restore(model=model, optimizer=model.optimizer)
    model.fit(
        tf.keras.utils.experimental.DatasetCreator(dataset_fn),
        epochs=ctx.epochs,
        initial_epoch=ctx.initial_epoch,
        steps_per_epoch=ctx.steps_per_epoch or len(x) // batch,
        callbacks=ctx.keras_callbacks(),
        verbose=0,
    )


def evaluate(ctx: raytf.TrainContext) -> None:
    """The side-car evaluator: scores every checkpoint the chief commits, on the validation split."""
    data = synthetic if ctx.params.get("data") == "synthetic" else digits
    _, (xv, yv) = data(seed=ctx.seed)
    model = build_model(0.01)
    ctx.restore(model=model)
    ds = tf.data.Dataset.from_tensor_slices((xv, yv)).batch(256)
    for _ in ctx.watch_checkpoints():
        ctx.report(model.evaluate(ds, return_dict=True, verbose=0), kind="eval")
