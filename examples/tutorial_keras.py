"""Multi-worker Keras written the way TensorFlow's "Multi-worker training with Keras" tutorial writes it: the
program reads TF_CONFIG, builds a MultiWorkerMirroredStrategy before touching anything else in TensorFlow, and
looks after its own fault tolerance (BackupAndRestore, ModelCheckpoint, load_weights(latest_checkpoint) when it
starts again), saving the model the tutorial's way (the chief writes the real path, the others a temporary one
they delete). Nothing in it knows about raytf: start it by hand on every machine with its own TF_CONFIG, or let
raytf start it on every task (conf/tutorial_keras.yaml):

    python -m raytf.launch conf/tutorial_keras.yaml

raytf points --checkpoint-dir and --backup-dir at the task's $RAYTF_CHECKPOINT_DIR (train.args), which it commits
to <run>/checkpoints/ after every epoch and restores on every task before a retry or a relaunch; everything else
the program writes (./saved_model, ./logs) lands in the task's own working directory, uploaded to
<run>/workdir/<role><index>/.
"""

import argparse
import json
import os

import tensorflow as tf

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=3)
parser.add_argument("--steps-per-epoch", type=int, default=20)
parser.add_argument("--per-worker-batch-size", type=int, default=32)
parser.add_argument("--checkpoint-dir", default="./training_checkpoints")
parser.add_argument("--backup-dir", default="./backup")
parser.add_argument("--model-dir", default="./saved_model")
parser.add_argument("--log-dir", default="./logs")
args = parser.parse_args()

tf_config = json.loads(os.environ["TF_CONFIG"])
num_workers = len(tf_config["cluster"]["worker"])
task_type, task_id = tf_config["task"]["type"], tf_config["task"]["index"]

# First, before any other TensorFlow call: collective ops are configured when the strategy is built.
strategy = tf.distribute.MultiWorkerMirroredStrategy()


def digits_dataset(batch_size):
    """scikit-learn's 8x8 digits (bundled: no download), shuffled and repeated."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    x, y = (digits.images / 16.0).astype("float32"), digits.target.astype("int64")
    return tf.data.Dataset.from_tensor_slices((x, y)).shuffle(len(x), seed=0).repeat().batch(batch_size)


def build_and_compile_model():
    model = tf.keras.Sequential([
        tf.keras.layers.InputLayer(input_shape=(8, 8)),
        tf.keras.layers.Reshape(target_shape=(8, 8, 1)),
        tf.keras.layers.Conv2D(16, 3, activation="relu"),
        tf.keras.layers.Flatten(),
        tf.keras.layers.Dense(64, activation="relu"),
        tf.keras.layers.Dense(10),
    ])
    model.compile(loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  optimizer=tf.keras.optimizers.SGD(learning_rate=0.05), metrics=["accuracy"])
    return model


def is_chief():
    return task_type == "chief" or (task_type == "worker" and task_id == 0 and "chief" not in tf_config["cluster"])


def write_filepath(filepath):
    """The tutorial's rule: only the chief writes the real path; the others write a temporary one."""
    dirpath, base = os.path.dirname(filepath), os.path.basename(filepath)
    if not is_chief():
        dirpath = os.path.join(dirpath, f"workertemp_{task_id}")
        tf.io.gfile.makedirs(dirpath)
    return os.path.join(dirpath, base)


global_batch_size = args.per_worker_batch_size * num_workers
with strategy.scope():
    model = build_and_compile_model()

latest = tf.train.latest_checkpoint(args.checkpoint_dir)
if latest:  # started again after a failure: carry on from the last checkpoint
    model.load_weights(latest)
    print(f"restored weights from {latest}")

callbacks = [
    tf.keras.callbacks.BackupAndRestore(backup_dir=args.backup_dir),
    tf.keras.callbacks.ModelCheckpoint(os.path.join(args.checkpoint_dir, "ckpt-{epoch:03d}"), save_weights_only=True),
    tf.keras.callbacks.TensorBoard(log_dir=args.log_dir),
    tf.keras.callbacks.LearningRateScheduler(lambda epoch, lr: lr if epoch < 2 else lr * 0.5),
]
history = model.fit(digits_dataset(global_batch_size), epochs=args.epochs, steps_per_epoch=args.steps_per_epoch,
                    callbacks=callbacks)
print("final accuracy", history.history["accuracy"][-1] if history.history else None)

# The weights of the last checkpoint, as the tutorial reloads them before saving the model.
model.load_weights(tf.train.latest_checkpoint(args.checkpoint_dir))
model_path = write_filepath(args.model_dir)
model.save(model_path)
if not is_chief():
    tf.io.gfile.rmtree(os.path.dirname(model_path))
