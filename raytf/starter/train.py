"""A training function, written by `raytf init` for you to edit: a small Keras classifier on synthetic data.
raytf calls `train(ctx)` on every worker: build the model under `ctx.strategy.scope()`, resume with
`ctx.restore(...)`, and fit with `ctx.keras_callbacks()` (metrics, checkpoints and an exact resume).

Run it: raytf launch raytf.yaml
"""

import numpy as np
import tensorflow as tf


def train(ctx):
    rng = np.random.default_rng(ctx.seed)
    x = rng.normal(size=(2048, 16)).astype("float32")
    y = (x[:, :8].sum(axis=1) > 0).astype("int64")  # the label: a rule the model can learn
    data = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(len(x), seed=ctx.seed).repeat()
    data = data.batch(ctx.global_batch_size, drop_remainder=True)

    with ctx.strategy.scope():
        model = tf.keras.Sequential([
            tf.keras.layers.Input(shape=(16,)),
            tf.keras.layers.Dense(32, activation="relu"),
            tf.keras.layers.Dense(2),
        ])
        model.compile(optimizer=tf.keras.optimizers.Adam(float(ctx.params.get("learning_rate", 0.01))),
                      loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
    initial_epoch = ctx.restore(model=model, optimizer=model.optimizer)  # 0, or where a resume starts
    model.fit(data, epochs=ctx.epochs, initial_epoch=initial_epoch, steps_per_epoch=ctx.steps_per_epoch,
              callbacks=ctx.keras_callbacks(), verbose=0)
