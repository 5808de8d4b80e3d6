"""A tutorial-style MWMS script that says what weights each replica holds: when it starts (after
load_weights(latest_checkpoint), as TF's guide resumes) and after fit (load_weights(latest_checkpoint) again, as
the guide does before saving). Worker 1 is killed at the end of its second epoch in attempt 1. Reports the
weights' checksums with raytf.report, so the test compares them across ranks."""

import json
import os
import signal
import sys

import numpy as np
import tensorflow as tf

import raytf

checkpoint_dir = sys.argv[1]
tf_config = json.loads(os.environ["TF_CONFIG"])
strategy = tf.distribute.MultiWorkerMirroredStrategy()

rng = np.random.default_rng(0)
x, y = rng.random((512, 8), dtype=np.float32), rng.integers(0, 4, 512)
data = tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(16)
with strategy.scope():
    model = tf.keras.Sequential([tf.keras.layers.Dense(8, activation="relu"), tf.keras.layers.Dense(4)])
    model.compile(tf.keras.optimizers.SGD(0.1), tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.build((None, 8))


def checksum() -> float:
    return float(sum(np.abs(w).sum() for w in model.get_weights()))


latest = tf.train.latest_checkpoint(checkpoint_dir)
if latest:
    model.load_weights(latest)
raytf.report({"w_start": checksum(), "restored_epoch": float(latest.rsplit("-", 1)[1]) if latest else 0.0})


class KillWorker1(tf.keras.callbacks.Callback):
    def on_epoch_end(self, epoch, logs=None):
        if os.environ["RAYTF_ATTEMPT"] == "1" and tf_config["task"]["index"] == 1 and epoch == 1:
            os.kill(os.getpid(), signal.SIGKILL)


model.fit(data, epochs=4, steps_per_epoch=5, callbacks=[
    tf.keras.callbacks.ModelCheckpoint(os.path.join(checkpoint_dir, "ckpt-{epoch}"), save_weights_only=True),
    KillWorker1()])
model.load_weights(tf.train.latest_checkpoint(checkpoint_dir))
raytf.report({"w_end": checksum()})
