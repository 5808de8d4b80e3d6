"""A ParameterServerStrategy Keras program written the usual way for launching by hand: the same file runs on
every task; ps and worker tasks start a TF server and wait, the chief coordinates training. Nothing in it
knows about raytf. Under raytf only the chief runs it (raytf starts the ps and worker servers itself).

With raytf:
    python -m raytf.launch conf/ps_local.yaml train.entrypoint= train.script=examples/ps_script.py \
        'train.args=[--working-dir,"{checkpoint_dir}"]'
"""

import argparse
import os

import numpy as np
import tensorflow as tf

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=3)
parser.add_argument("--steps-per-epoch", type=int, default=20)
parser.add_argument("--global-batch-size", type=int, default=64)
parser.add_argument("--working-dir", default="/tmp/ps-working-dir", help="checkpoints and backups")
args = parser.parse_args()

cluster_resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
if cluster_resolver.task_type in ("worker", "ps"):
    # Launched by hand on a ps or worker machine: serve until killed.
    server = tf.distribute.Server(cluster_resolver.cluster_spec(), job_name=cluster_resolver.task_type,
                                  task_index=cluster_resolver.task_id, protocol="grpc", start=True)
    server.join()

strategy = tf.distribute.ParameterServerStrategy(cluster_resolver)


def dataset_fn(input_context):
    rng = np.random.default_rng(input_context.input_pipeline_id)
    patterns = np.random.default_rng(0).random((10, 8), dtype=np.float32)
    y = rng.integers(0, 10, size=4096)
    x = patterns[y] + 0.3 * rng.standard_normal((4096, 8)).astype(np.float32)
    batch_size = input_context.get_per_replica_batch_size(args.global_batch_size)
    return tf.data.Dataset.from_tensor_slices((x, y)).shuffle(4096).repeat().batch(batch_size).prefetch(2)


with strategy.scope():
    model = tf.keras.Sequential([tf.keras.layers.Dense(32, activation="relu"), tf.keras.layers.Dense(10)])
    model.compile(tf.keras.optimizers.legacy.SGD(learning_rate=0.1),
                  loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"],
                  steps_per_execution=5)

callbacks = [
    tf.keras.callbacks.ModelCheckpoint(filepath=os.path.join(args.working_dir, "ckpt"), save_weights_only=True),
    tf.keras.callbacks.BackupAndRestore(backup_dir=os.path.join(args.working_dir, "backup")),
]
model.fit(tf.keras.utils.experimental.DatasetCreator(dataset_fn), epochs=args.epochs,
          steps_per_epoch=args.steps_per_epoch, callbacks=callbacks, verbose=2)
print("final weights norm:", float(tf.linalg.global_norm(model.trainable_variables)))
