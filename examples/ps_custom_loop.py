"""ParameterServerStrategy custom loop: ClusterCoordinator.schedule over per-worker datasets.

Run: python -m raytf.launch conf/ps_local.yaml train.entrypoint=examples.ps_custom_loop:train
"""

from __future__ import annotations

import tensorflow as tf

import raytf
from examples.data import digits, synthetic


def train(ctx: raytf.TrainContext) -> None:
    p = ctx.params
    strategy, coordinator = ctx.strategy, ctx.coordinator
    tf.keras.utils.set_random_seed(ctx.seed)
    data = synthetic if p.get("data") == "synthetic" else digits
    (x, y), _ = data(seed=ctx.seed)
    x = x.reshape(len(x), -1)
    batch = ctx.global_batch_size
    steps = ctx.steps_per_epoch or len(x) // batch

    with strategy.scope():
        model = tf.keras.Sequential([
            tf.keras.layers.Input(shape=(64,)),
            tf.keras.layers.Dense(128, activation="relu"),
            tf.keras.layers.Dense(10),
        ])
        optimizer = tf.keras.optimizers.SGD(float(p.get("learning_rate", 0.1)), momentum=0.9)
        accuracy = tf.keras.metrics.SparseCategoricalAccuracy()
    loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(
        from_logits=True, reduction=tf.keras.losses.Reduction.NONE)
    ctx.restore(model=model, optimizer=optimizer)

    def dataset_fn(input_context: tf.distribute.InputContext) -> tf.data.Dataset:
        ds = tf.data.Dataset.from_tensor_slices((x, y)).shard(
            input_context.num_input_pipelines, input_context.input_pipeline_id)
        return ds.shuffle(len(x), seed=ctx.seed).repeat().batch(batch, drop_remainder=True).prefetch(2)

    @tf.function
    def per_worker_dataset_fn():
        return strategy.distribute_datasets_from_function(dataset_fn)

    iterator = iter(coordinator.create_per_worker_dataset(per_worker_dataset_fn))

    @tf.function
    def step_fn(it):
        def replica_fn(inputs):
            features, labels = inputs
            with tf.GradientTape() as tape:
                logits = model(features, training=True)
                loss = tf.nn.compute_average_loss(loss_fn(labels, logits), global_batch_size=batch)
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables))
            accuracy.update_state(labels, logits)
            return loss

        losses = strategy.run(replica_fn, args=(next(it),))
        return strategy.reduce(tf.distribute.ReduceOp.SUM, losses, axis=None)

    for _ in ctx.epoch_range():
        accuracy.reset_state()
        # Closures run asynchronously on whichever worker is free; join() waits for all of them.
        losses = [coordinator.schedule(step_fn, args=(iterator,)) for _ in range(steps)]
        coordinator.join()
        values = [float(v.fetch()) for v in losses]
        ctx.step_end({"loss": values[-1]}, steps=steps)
        ctx.epoch_end({"loss": sum(values) / len(values), "accuracy": accuracy.result()})
