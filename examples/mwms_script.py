"""A multi-worker Keras script written the usual way for launching by hand: start this same file on every
machine with its own TF_CONFIG. Nothing in it knows about raytf; the only change from the by-hand version
is that the line setting TF_CONFIG to hard-coded addresses is gone.

By hand (two terminals):
    TF_CONFIG='{"cluster": {"worker": ["localhost:12345", "localhost:23456"]},
                "task": {"type": "worker", "index": 0}}' python examples/mwms_script.py
    TF_CONFIG='... "index": 1}}' python examples/mwms_script.py

With raytf (conf/script.yaml):
    python -m raytf.launch conf/script.yaml
"""

import argparse
import json
import os

import numpy as np
import tensorflow as tf

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=3)
parser.add_argument("--steps-per-epoch", type=int, default=70)
parser.add_argument("--per-worker-batch-size", type=int, default=64)
parser.add_argument("--model-dir", default="/tmp/keras-model", help="where ModelCheckpoint writes")
parser.add_argument("--log-dir", default="/tmp/keras-logs", help="TensorBoard logs")
args = parser.parse_args()

# os.environ["TF_CONFIG"] = json.dumps({"cluster": {"worker": ["10.1.10.58:12345", "10.1.10.250:12345"]},
#                                       "task": {"type": "worker", "index": 0}})
tf_config = json.loads(os.environ["TF_CONFIG"])
num_workers = len(tf_config["cluster"]["worker"])


def dataset(batch_size):
    # Synthetic 28x28 "digits": each class a fixed pattern plus noise (no download).
    rng = np.random.default_rng(0)
    patterns = rng.random((10, 28, 28), dtype=np.float32)
    y = rng.integers(0, 10, size=6000)
    x = patterns[y] + 0.3 * rng.standard_normal((6000, 28, 28)).astype(np.float32)
    return tf.data.Dataset.from_tensor_slices((x, y)).shuffle(6000).repeat().batch(batch_size)


def build_and_compile_cnn_model():
    model = tf.keras.Sequential([
        tf.keras.layers.InputLayer(input_shape=(28, 28)),
        tf.keras.layers.Reshape(target_shape=(28, 28, 1)),
        tf.keras.layers.Conv2D(32, 3, activation="relu"),
        tf.keras.layers.Flatten(),
        tf.keras.layers.Dense(128, activation="relu"),
        tf.keras.layers.Dense(10),
    ])
    model.compile(loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  optimizer=tf.keras.optimizers.SGD(learning_rate=0.001), metrics=["accuracy"])
    return model


strategy = tf.distribute.MultiWorkerMirroredStrategy()
global_batch_size = args.per_worker_batch_size * num_workers
multi_worker_dataset = dataset(global_batch_size)

with strategy.scope():
    multi_worker_model = build_and_compile_cnn_model()

callbacks = [
    tf.keras.callbacks.TensorBoard(log_dir=args.log_dir),
    tf.keras.callbacks.ModelCheckpoint(filepath=os.path.join(args.model_dir, "ckpt-{epoch}"),
                                       save_weights_only=True),
]
multi_worker_model.fit(multi_worker_dataset, epochs=args.epochs, steps_per_epoch=args.steps_per_epoch,
                       callbacks=callbacks)
