"""A custom training loop under MultiWorkerMirroredStrategy: strategy.run + strategy.reduce.

Run: python -m raytf.launch conf/local.yaml train.entrypoint=examples.custom_loop:train
"""

from __future__ import annotations

import tensorflow as tf

import raytf
from examples.data import digits, synthetic


def train(ctx: raytf.TrainContext) -> None:
    p = ctx.params
    strategy = ctx.strategy
    tf.keras.utils.set_random_seed(ctx.seed)
    data = synthetic if p.get("data") == "synthetic" else digits
    (x, y), _ = data(seed=ctx.seed)
    global_batch = ctx.global_batch_size
    steps = ctx.steps_per_epoch or len(x) // global_batch

    ds = (tf.data.Dataset.from_tensor_slices((x.reshape(len(x), -1), y))
          .shuffle(len(x), seed=ctx.seed).repeat().batch(global_batch, drop_remainder=True))
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    # Each worker gets its shard; per-replica batches are global_batch / num_replicas.
    dist_ds = strategy.experimental_distribute_dataset(ds.with_options(options))

    with strategy.scope():
        model = tf.keras.Sequential([
            tf.keras.layers.Input(shape=(64,)),
            tf.keras.layers.Dense(128, activation="relu"),
            tf.keras.layers.Dense(10),
        ])
        optimizer = tf.keras.optimizers.SGD(float(p.get("learning_rate", 0.1)), momentum=0.9)
        train_accuracy = tf.keras.metrics.SparseCategoricalAccuracy()
    loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(
        from_logits=True, reduction=tf.keras.losses.Reduction.NONE)
    ctx.restore(model=model, optimizer=optimizer)

    def replica_step(inputs):
        features, labels = inputs
        with tf.GradientTape() as tape:
            logits = model(features, training=True)
            # Scale by the *global* batch: the all-reduce sums the replicas' gradients.
            loss = tf.nn.compute_average_loss(loss_fn(labels, logits), global_batch_size=global_batch)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        train_accuracy.update_state(labels, logits)
        return loss

    @tf.function
    def train_step(iterator):
        per_replica_loss = strategy.run(replica_step, args=(next(iterator),))
        return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica_loss, axis=None)

    iterator = iter(dist_ds)
    for epoch in ctx.epoch_range():
        total = 0.0
        # Resuming from a mid-epoch checkpoint (a step checkpoint, or a save at preemption): finish that
        # epoch's remaining steps only.
        done = ctx.step - epoch * steps
        for _ in range(done, steps):
            loss = train_step(iterator)
            total += loss
            ctx.step_end({"loss": loss})
        # (A save that landed on an epoch's last step leaves nothing to train: report no metrics then.)
        ctx.epoch_end({"loss": total / (steps - done), "accuracy": train_accuracy.result()} if done < steps else None)
        train_accuracy.reset_state()
