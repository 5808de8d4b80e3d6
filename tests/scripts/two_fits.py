"""Several Model.fit calls in one program (train, then fine-tune at a lower learning rate), the way blog examples
write them; worker 1 is killed during the second fit of attempt 1. With --fail-after, the program's own code
after training raises KeyError (a plotting bug: history has no 'val_accuracy')."""

import os
import signal
import sys

import numpy as np
import tensorflow as tf

checkpoint_dir = sys.argv[1]
strategy = tf.distribute.MultiWorkerMirroredStrategy()
rng = np.random.default_rng(0)
x, y = rng.random((512, 8), dtype=np.float32), rng.integers(0, 4, 512)
data = tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(16)
with strategy.scope():
    model = tf.keras.Sequential([tf.keras.layers.Dense(8, activation="relu"), tf.keras.layers.Dense(4)])
    model.compile(tf.keras.optimizers.SGD(0.1), tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))


class KillWorker1(tf.keras.callbacks.Callback):
    def on_epoch_end(self, epoch, logs=None):
        if os.environ["RAYTF_ATTEMPT"] == "1" and os.environ["RAYTF_RANK"] == "1" and "--kill" in sys.argv:
            os.kill(os.getpid(), signal.SIGKILL)


save = tf.keras.callbacks.ModelCheckpoint(os.path.join(checkpoint_dir, "ckpt"), save_weights_only=True)
history = model.fit(data, epochs=2, steps_per_epoch=5, callbacks=[save])
model.optimizer.learning_rate.assign(0.01)  # fine-tune
history = model.fit(data, epochs=2, steps_per_epoch=5, callbacks=[save, KillWorker1()])
if "--fail-after" in sys.argv:
    print("best val accuracy", max(history.history["val_accuracy"]))
