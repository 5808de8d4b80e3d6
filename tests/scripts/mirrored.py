"""The blog examples' MirroredStrategy program, started on every task of a 2-worker cluster: MirroredStrategy
ignores TF_CONFIG, so each copy trains alone. With --loop, a custom training loop (no Model.fit); else Keras fit."""

import sys

import numpy as np
import tensorflow as tf

import raytf

strategy = tf.distribute.MirroredStrategy()
rng = np.random.default_rng(0)
x, y = rng.random((256, 8), dtype=np.float32), rng.integers(0, 4, 256)
data = tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(16)
with strategy.scope():
    model = tf.keras.Sequential([tf.keras.layers.Dense(8, activation="relu"), tf.keras.layers.Dense(4)])
    model.compile(tf.keras.optimizers.SGD(0.1), tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
if "--loop" not in sys.argv:
    model.fit(data, epochs=2, steps_per_epoch=5)
    sys.exit(0)
loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")
with strategy.scope():
    optimizer = tf.keras.optimizers.SGD(0.1)


@tf.function
def train_step(batch):
    def step(xb, yb):
        with tf.GradientTape() as tape:
            loss = tf.nn.compute_average_loss(loss_fn(yb, model(xb)), global_batch_size=16)
        optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
        return loss
    return strategy.reduce("SUM", strategy.run(step, args=batch), axis=None)


batches = iter(strategy.experimental_distribute_dataset(data))
for epoch in range(2):
    for _ in range(5):
        loss = train_step(next(batches))
    raytf.report({"loss": float(loss)}, epoch=epoch + 1, kind="epoch")
