"""A multi-worker custom training loop written the way TensorFlow's "Custom training loop with Keras and
MultiWorkerMirroredStrategy" tutorial writes it: the program reads TF_CONFIG, builds the strategy first, feeds
each worker its share with distribute_datasets_from_function, and checkpoints with a tf.train.CheckpointManager
(the chief into the real directory, the others into a temporary one they delete), restoring the latest checkpoint
when it starts. Nothing in it knows about raytf; with raytf (conf/tutorial_ctl.yaml):

    python -m raytf.launch conf/tutorial_ctl.yaml

--checkpoint-dir is the task's $RAYTF_CHECKPOINT_DIR (train.args): each CheckpointManager.save on the chief is
committed to <run>/checkpoints/, and every task finds the latest there again on a retry or a relaunch.
"""

import argparse
import json
import os

import tensorflow as tf

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=3)
parser.add_argument("--steps-per-epoch", type=int, default=20)
parser.add_argument("--per-worker-batch-size", type=int, default=32)
parser.add_argument("--checkpoint-dir", default="./ckpt")
args = parser.parse_args()

tf_config = json.loads(os.environ["TF_CONFIG"])
num_workers = len(tf_config["cluster"]["worker"])
strategy = tf.distribute.MultiWorkerMirroredStrategy()
task_type, task_id = strategy.cluster_resolver.task_type, strategy.cluster_resolver.task_id
global_batch_size = args.per_worker_batch_size * num_workers


def dataset_fn(input_context):
    from sklearn.datasets import load_digits

    digits = load_digits()
    x, y = (digits.images / 16.0).astype("float32"), digits.target.astype("int64")
    batch_size = input_context.get_per_replica_batch_size(global_batch_size)
    ds = tf.data.Dataset.from_tensor_slices((x, y)).shard(input_context.num_input_pipelines,
                                                          input_context.input_pipeline_id)
    return ds.shuffle(len(x), seed=0).repeat().batch(batch_size)


def is_chief():
    return task_type is None or task_type == "chief" or (task_type == "worker" and task_id == 0)


def write_filepath(filepath):
    dirpath, base = os.path.dirname(filepath), os.path.basename(filepath)
    if not is_chief():
        dirpath = os.path.join(dirpath, f"workertemp_{task_id}")
        tf.io.gfile.makedirs(dirpath)
    return os.path.join(dirpath, base)


with strategy.scope():
    model = tf.keras.Sequential([tf.keras.layers.Flatten(input_shape=(8, 8)),
                                 tf.keras.layers.Dense(64, activation="relu"), tf.keras.layers.Dense(10)])
    optimizer = tf.keras.optimizers.SGD(learning_rate=0.05)
    train_accuracy = tf.keras.metrics.SparseCategoricalAccuracy(name="train_accuracy")
    epoch = tf.Variable(initial_value=0, dtype=tf.int64, name="epoch")
    step_in_epoch = tf.Variable(initial_value=0, dtype=tf.int64, name="step_in_epoch")

per_worker_dataset = strategy.distribute_datasets_from_function(dataset_fn)
loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")


@tf.function
def train_step(iterator):
    def step_fn(inputs):
        x, y = inputs
        with tf.GradientTape() as tape:
            logits = model(x, training=True)
            loss = tf.nn.compute_average_loss(loss_fn(y, logits), global_batch_size=global_batch_size)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        train_accuracy.update_state(y, logits)
        return loss

    per_replica_losses = strategy.run(step_fn, args=(next(iterator),))
    return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica_losses, axis=None)


checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer, epoch=epoch, step_in_epoch=step_in_epoch)
write_checkpoint_dir = write_filepath(args.checkpoint_dir)
checkpoint_manager = tf.train.CheckpointManager(checkpoint, directory=write_checkpoint_dir, max_to_keep=1)
latest = tf.train.latest_checkpoint(args.checkpoint_dir)
if latest:
    checkpoint.restore(latest)
    print(f"restored {latest}: epoch {int(epoch.numpy())}")

iterator = iter(per_worker_dataset)
while epoch.numpy() < args.epochs:
    total_loss, num_batches = 0.0, 0
    while step_in_epoch.numpy() < args.steps_per_epoch:
        total_loss += train_step(iterator)
        num_batches += 1
        step_in_epoch.assign_add(1)
    print(f"Epoch: {int(epoch.numpy()) + 1}, accuracy: {train_accuracy.result().numpy():.3f}, "
          f"train_loss: {float(total_loss) / max(num_batches, 1):.3f}")
    train_accuracy.reset_state()
    epoch.assign_add(1)
    step_in_epoch.assign(0)
    checkpoint_manager.save()
    if not is_chief():
        tf.io.gfile.rmtree(write_checkpoint_dir)
