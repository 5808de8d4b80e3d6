"""Ray Data input in a script (raytf.fit(cfg, datasets={"train": rows of id, x, y})): an MWMS custom loop over
raytf.dataset("train") through strategy.experimental_distribute_dataset, linear regression; the ids each worker's
replicas saw per epoch written to argv[1] (ids-e<epoch>-r<rank>.json, with the per-replica batch sizes)."""

import json
import os
import sys

import numpy as np
import tensorflow as tf

import raytf

ids_dir = sys.argv[1]
epochs = int(sys.argv[2]) if len(sys.argv) > 2 else 2
strategy = tf.distribute.MultiWorkerMirroredStrategy()
rank = int(os.environ["RAYTF_RANK"])
GLOBAL_BATCH = 16  # 8 rows per replica and step on 2 workers of 1 replica
dist = strategy.experimental_distribute_dataset(raytf.dataset("train", ["id", "x"], "y", batch_size=GLOBAL_BATCH))
with strategy.scope():
    w = tf.Variable(tf.zeros([4, 1]), name="w")
    b = tf.Variable(0.0, name="b")
    opt = tf.keras.optimizers.SGD(0.05)


@tf.function
def step(features, y):
    def replica(features, y):
        with tf.GradientTape() as tape:
            pred = tf.squeeze(tf.matmul(tf.cast(features["x"], tf.float32), w), 1) + b
            loss = tf.reduce_sum(tf.square(pred - tf.cast(y, tf.float32))) / GLOBAL_BATCH
        grads = tape.gradient(loss, [w, b])
        opt.apply_gradients(zip(grads, [w, b]))
        return loss, features["id"]

    loss, ids = strategy.run(replica, args=(features, y))
    return strategy.reduce(tf.distribute.ReduceOp.SUM, loss, axis=None), ids


for epoch in range(epochs):
    seen, sizes, losses = [], [], []
    for features, y in dist:
        loss, ids = step(features, y)
        local = [t.numpy() for t in strategy.experimental_local_results(ids)]
        seen += [int(i) for part in local for i in part]
        sizes += [len(part) for part in local]
        losses.append(float(loss))
        raytf.report({"loss": losses[-1]})
    with open(os.path.join(ids_dir, f"ids-e{epoch}-r{rank}.json"), "w") as f:
        json.dump({"ids": seen, "sizes": sizes}, f)
    raytf.report({"loss": float(np.mean(losses))}, epoch=epoch + 1, kind="epoch")
