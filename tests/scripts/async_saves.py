"""A custom loop that saves as TF's Model Garden (orbit) does by default: tf.train.CheckpointManager.save with
asynchronous writes (CheckpointOptions(enable_async=True): save returns before the files are written) and
max_to_keep pruning old checkpoints on the writer's thread; and that writes its scalars with tf.summary into the
checkpoint directory's train/ (the Model Garden's model_dir/train). No raytf in it. (raytf issue 55)"""

import os
import shutil
import time

import tensorflow as tf

# The copy of a big checkpoint (the were 150-190 MB) over a slow disk, here in a test's time: each file takes
# 0.2 s to copy, so that the writer's thread, still at work, changes the directory while it is copied.
_copy2 = shutil.copy2


def _slow_copy(src, dst, **kwargs):
    time.sleep(0.2)
    return _copy2(src, dst, **kwargs)


shutil.copy2 = _slow_copy
_copytree = shutil.copytree
shutil.copytree = lambda src, dst, **kwargs: _copytree(src, dst, copy_function=_slow_copy, **kwargs)

# 4 MiB of weights: a write takes a moment on the writer's thread.
weights = tf.Variable(tf.zeros([1 << 20]))
step = tf.Variable(0, dtype=tf.int64)
checkpoint = tf.train.Checkpoint(weights=weights, step=step)
manager = tf.train.CheckpointManager(checkpoint, os.environ["RAYTF_CHECKPOINT_DIR"], max_to_keep=2)
options = tf.train.CheckpointOptions(enable_async=True)
writer = tf.summary.create_file_writer(os.path.join(os.environ["RAYTF_CHECKPOINT_DIR"], "train"))
for n in range(1, 5):
    weights.assign_add(tf.ones_like(weights))
    step.assign(n * 10)
    with writer.as_default(step=n * 10):
        tf.summary.scalar("training_loss", 1.0 / n)
        tf.summary.scalar("learning_rate", tf.constant(0.1, tf.float64))
    writer.flush()
    manager.save(checkpoint_number=n * 10, options=options)
manager.sync()
print("saved", manager.checkpoints, flush=True)
