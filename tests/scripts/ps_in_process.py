"""TF's ParameterServerStrategy tutorial runs on an in-process test cluster (its create_in_process_cluster, with
portpicker's ports); left in, under raytf it trains on that private cluster while raytf's ps and workers idle."""

import socket

import numpy as np
import tensorflow as tf


def pick_unused_port():  # portpicker.pick_unused_port, without the package
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


def create_in_process_cluster(num_workers, num_ps):
    cluster_dict = {"worker": [f"localhost:{pick_unused_port()}" for _ in range(num_workers)],
                    "ps": [f"localhost:{pick_unused_port()}" for _ in range(num_ps)]}
    cluster_spec = tf.train.ClusterSpec(cluster_dict)
    for i in range(num_workers):
        tf.distribute.Server(cluster_spec, job_name="worker", task_index=i, protocol="grpc", start=True)
    for i in range(num_ps):
        tf.distribute.Server(cluster_spec, job_name="ps", task_index=i, protocol="grpc", start=True)
    return tf.distribute.cluster_resolver.SimpleClusterResolver(cluster_spec, rpc_layer="grpc")


strategy = tf.distribute.ParameterServerStrategy(create_in_process_cluster(num_workers=2, num_ps=1))
rng = np.random.default_rng(0)
x, y = rng.random((256, 8), dtype=np.float32), rng.integers(0, 4, 256)
with strategy.scope():
    model = tf.keras.Sequential([tf.keras.layers.Dense(8, activation="relu"), tf.keras.layers.Dense(4)])
    model.compile(tf.keras.optimizers.legacy.SGD(0.1),
                  tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
dataset = tf.keras.utils.experimental.DatasetCreator(
    lambda ctx: tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(16))
model.fit(dataset, epochs=2, steps_per_epoch=5)
