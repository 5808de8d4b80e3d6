"""Keras CNN (Conv2D + SeparableConv2D) on the digits data, trained with model.fit under raytf.

Run: python -m raytf.launch conf/local.yaml
"""

from __future__ import annotations

import tensorflow as tf

import raytf
from examples.data import digits, synthetic


def build_model(learning_rate: float) -> tf.keras.Model:
    model = tf.keras.Sequential([
        tf.keras.layers.Input(shape=(8, 8, 1)),
        tf.keras.layers.Conv2D(32, 3, padding="same", activation="relu"),
        tf.keras.layers.SeparableConv2D(64, 3, padding="same", activation="relu"),
        tf.keras.layers.MaxPooling2D(),
        tf.keras.layers.SeparableConv2D(64, 3, padding="same", activation="relu"),
        tf.keras.layers.Flatten(),
        tf.keras.layers.Dense(10),
    ])
    model.compile(
        optimizer=tf.keras.optimizers.Adam(learning_rate),
        loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )
    return model


def make_dataset(x, y, global_batch: int, *, shuffle: bool, seed: int) -> tf.data.Dataset:
    ds = tf.data.Dataset.from_tensor_slices((x, y))
    if shuffle:
        ds = ds.shuffle(len(x), seed=seed, reshuffle_each_iteration=True)
    ds = ds.repeat().batch(global_batch, drop_remainder=True).prefetch(tf.data.AUTOTUNE)
    # In-memory data: shard by element, each worker reading its share of every global batch.
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    return ds.with_options(options)


def learning_rate(ctx: raytf.TrainContext, base: float) -> float:
    """`base` is the rate for the full size (cluster.num_workers). Elastic training may run an attempt with fewer
    workers (ctx.num_workers < ctx.max_workers), whose global batch is smaller in proportion unless
    cluster.elastic.keep_global_batch holds it: the rate follows the global batch (the linear scaling rule).
    At full size it is `base` exactly."""
    if ctx.cfg.cluster.elastic.keep_global_batch:
        return base
    return base * (ctx.num_workers / ctx.max_workers)


def train(ctx: raytf.TrainContext) -> None:
    p = ctx.params
    tf.keras.utils.set_random_seed(ctx.seed)
    data = synthetic if p.get("data") == "synthetic" else digits
    (x, y), (xv, yv) = data(seed=ctx.seed)
    steps = ctx.steps_per_epoch or len(x) // ctx.global_batch_size
    lr = learning_rate(ctx, float(p.get("learning_rate", 0.01)))
    with ctx.strategy.scope():
        model = build_model(lr)
    ctx.restore(model=model, optimizer=model.optimizer)
    # The optimizer's learning rate is a variable its checkpoints hold: a resume brings back the one it was saved
    # with (another size's, after a resize). This attempt's, again.
    model.optimizer.learning_rate = lr
    # train.params.validation_steps: the batches of the held-out split evaluated after each epoch (unset or null:
    # all of it; 0: none).
    validation_steps = p.get("validation_steps")
    if validation_steps is None:
        validation_steps = max(1, len(xv) // ctx.global_batch_size)
    validation = {"validation_data": make_dataset(xv, yv, ctx.global_batch_size, shuffle=False, seed=ctx.seed),
                  "validation_steps": validation_steps} if validation_steps else {}
    model.fit(
        make_dataset(x, y, ctx.global_batch_size, shuffle=True, seed=ctx.seed),
        epochs=ctx.epochs,
        initial_epoch=ctx.initial_epoch,
        steps_per_epoch=steps,
        **validation,
        callbacks=ctx.keras_callbacks(),
        verbose=0,
    )
