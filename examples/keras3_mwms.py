"""Multi-worker training written for Keras 3 (`import keras`, TensorFlow's default Keras since 2.16), the way
TensorFlow's "Multi-worker training with Keras" tutorial writes its program: MultiWorkerMirroredStrategy built
first, the program's own fault tolerance (BackupAndRestore), a ModelCheckpoint, the model saved at the end. Nothing
in it knows about raytf (conf/keras3.yaml runs it on 2 workers):

    python -m raytf.launch conf/keras3.yaml

Keras 3's own multi-worker fit fails in its first step (keras-team/keras#20585); raytf corrects it in its tasks
(docs/keras3.md), keeps a worker that is not the chief from writing over the chief's saves, reports every epoch
as the run's metrics, commits --backup-dir and --checkpoint-dir (the task's $RAYTF_CHECKPOINT_DIR) after each
epoch and restores them on every task for a retry or a relaunch, where BackupAndRestore resumes.
"""

import argparse
import os

import tensorflow as tf

# First, before any other TensorFlow call: collective ops are configured when the strategy is built.
strategy = tf.distribute.MultiWorkerMirroredStrategy()

import keras  # noqa: E402  (Keras 3; after the strategy, as the tutorial orders it)

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=3)
parser.add_argument("--steps-per-epoch", type=int, default=20)
parser.add_argument("--per-worker-batch-size", type=int, default=32)
parser.add_argument("--checkpoint-dir", default="./checkpoints")
parser.add_argument("--backup-dir", default="./backup")
parser.add_argument("--model-dir", default="./saved_model")
args = parser.parse_args()


def digits_dataset(batch_size):
    """scikit-learn's 8x8 digits (bundled: no download), shuffled and repeated."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    x, y = (digits.images / 16.0).astype("float32"), digits.target.astype("int64")
    return tf.data.Dataset.from_tensor_slices((x, y)).shuffle(len(x), seed=0).repeat().batch(batch_size)


with strategy.scope():
    model = keras.Sequential([
        keras.Input((8, 8)),
        keras.layers.Reshape((8, 8, 1)),
        keras.layers.Conv2D(16, 3, activation="relu"),
        keras.layers.Flatten(),
        keras.layers.Dense(64, activation="relu"),
        keras.layers.Dense(10),
    ])
    model.compile(loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  optimizer=keras.optimizers.SGD(learning_rate=0.05), metrics=["accuracy"])

callbacks = [
    keras.callbacks.BackupAndRestore(backup_dir=args.backup_dir),
    keras.callbacks.ModelCheckpoint(os.path.join(args.checkpoint_dir, "model.keras")),
]
global_batch_size = args.per_worker_batch_size * strategy.num_replicas_in_sync
history = model.fit(digits_dataset(global_batch_size), epochs=args.epochs, steps_per_epoch=args.steps_per_epoch,
                    callbacks=callbacks)
print("final accuracy", history.history["accuracy"][-1] if history.history else None)
os.makedirs(args.model_dir, exist_ok=True)
model.save(os.path.join(args.model_dir, "model.keras"))
