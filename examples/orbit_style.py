"""A multi-worker custom training loop written the way orbit and the TensorFlow Model Garden write theirs
(`python -m official.vision.train --model_dir ...`): a global step (the optimizer's iterations), an inner loop of
`--steps-per-loop` steps in one tf.function, `tf.summary` scalars into `<model_dir>/train` after each loop, and a
tf.train.CheckpointManager that keeps the last 3 checkpoints, numbers each by the global step, saves every
`--checkpoint-interval` steps and at the end, asynchronously (CheckpointOptions(enable_async=True), the Model
Garden's default), and restores the latest at the start. Nothing in it knows about raytf; with raytf
(conf/orbit_style.yaml):

    python -m raytf.launch conf/orbit_style.yaml

--model-dir is each task's $RAYTF_CHECKPOINT_DIR (train.args' {checkpoint_dir}), on every worker: raytf commits the
chief's saves to <run>/checkpoints/ (named by their number, the global step), restores the latest into every task's
directory on a retry or a relaunch (so every worker resumes from the same step), and reads every worker's scalars
into metrics.parquet (`train/training_loss`, `train/learning_rate`). (The Model Garden's own non-chief workers save
into a temporary directory they delete: a relaunch restores only the chief, and the first collective fails with
"Collective instance ... expected ... data_type ..."; raytf says so.)
"""

import argparse
import os

import tensorflow as tf

parser = argparse.ArgumentParser()
parser.add_argument("--model-dir", required=True)
parser.add_argument("--train-steps", type=int, default=60)
parser.add_argument("--steps-per-loop", type=int, default=10)
parser.add_argument("--checkpoint-interval", type=int, default=20)
parser.add_argument("--per-worker-batch-size", type=int, default=32)
args = parser.parse_args()

strategy = tf.distribute.MultiWorkerMirroredStrategy()
global_batch = args.per_worker_batch_size * strategy.num_replicas_in_sync


def dataset_fn(input_context):
    # Synthetic regression data, a different shard per worker; repeated (the loop counts steps, not epochs).
    x = tf.random.stateless_normal([4096, 16], seed=[1, input_context.input_pipeline_id])
    y = tf.reduce_sum(x[:, :4], axis=1, keepdims=True)
    batch = input_context.get_per_replica_batch_size(global_batch)
    return tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(batch).prefetch(2)


with strategy.scope():
    model = tf.keras.Sequential([tf.keras.Input((16,)), tf.keras.layers.Dense(32, activation="relu"),
                                 tf.keras.layers.Dense(1)])
    learning_rate = tf.keras.optimizers.schedules.CosineDecay(0.05, decay_steps=max(1, args.train_steps))
    optimizer = tf.keras.optimizers.SGD(learning_rate)
global_step = optimizer.iterations
iterator = iter(strategy.distribute_datasets_from_function(dataset_fn))

checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer)
manager = tf.train.CheckpointManager(checkpoint, args.model_dir, max_to_keep=3, step_counter=global_step,
                                     checkpoint_interval=args.checkpoint_interval)
manager.restore_or_initialize()
print(f"starting at step {int(global_step.numpy())}", flush=True)
writer = tf.summary.create_file_writer(os.path.join(args.model_dir, "train"))
async_save = tf.train.CheckpointOptions(enable_async=True)


@tf.function
def train_loop(iterator, steps):
    def step_fn(x, y):
        with tf.GradientTape() as tape:
            per_example = tf.keras.losses.mean_squared_error(y, model(x, training=True))
            loss = tf.nn.compute_average_loss(per_example, global_batch_size=global_batch)
        optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
        return loss

    total = tf.constant(0.0)
    for _ in tf.range(steps):
        total += strategy.reduce("SUM", strategy.run(step_fn, args=next(iterator)), axis=None)
    return total / tf.cast(steps, tf.float32)


saved = None
while int(global_step.numpy()) < args.train_steps:
    steps = min(args.steps_per_loop, args.train_steps - int(global_step.numpy()))
    loss = train_loop(iterator, tf.constant(steps))
    with writer.as_default(step=global_step):
        tf.summary.scalar("training_loss", loss)
        tf.summary.scalar("learning_rate", learning_rate(global_step))
    writer.flush()
    if manager.save(checkpoint_number=global_step, check_interval=True, options=async_save):
        saved = int(global_step.numpy())
if saved is not None and saved != int(global_step.numpy()):  # (orbit's checkpoint_at_completion)
    manager.save(checkpoint_number=global_step, check_interval=False, options=async_save)
manager.sync()
print(f"trained to step {int(global_step.numpy())}, loss {float(loss):.4f}", flush=True)
