"""Training functions for the integration tests (entrypoints like tests.train_fns:fail_on_rank1)."""

import raytf


def fail_on_rank1(ctx: raytf.TrainContext) -> None:
    """Rank 1 raises before its first step; every other rank waits in an all-reduce with it (as a training step
    would) until the group is torn down: no rank makes a step."""
    if ctx.rank == 1:
        raise ValueError("rank 1 refuses to train")
    import tensorflow as tf

    @tf.function
    def all_reduce():
        return ctx.strategy.run(lambda: tf.distribute.get_replica_context().all_reduce("sum", tf.constant(1.0)))

    all_reduce()


def ps_keras_on_the_chief_only(ctx: raytf.TrainContext) -> None:
    """examples.ps_keras:train, refusing to run anywhere but on ParameterServerStrategy's chief: its workers and ps
    run TF's servers, never the function (a run that succeeds shows it)."""
    if ctx.role != "chief":
        raise ValueError(f"the training function ran on {ctx.role} {ctx.rank}, not on the chief")
    from examples.ps_keras import train

    train(ctx)


def report_only(ctx: raytf.TrainContext) -> None:
    """No model: reports a metric per epoch, to exercise the event path alone."""
    for _ in ctx.epoch_range():
        for _ in range(ctx.steps_per_epoch or 1):
            ctx.step_end({"value": float(ctx.rank)})
        ctx.epoch_end({"value": float(ctx.rank), "replicas": ctx.num_replicas})


def fail_always(ctx: raytf.TrainContext) -> None:
    raise RuntimeError(f"{ctx.role} {ctx.rank} fails on purpose")


def _on_rank1_first_attempt(ctx: raytf.TrainContext, at_step: int, action, train=None) -> None:
    """Train examples.keras_cnn (or `train`), running `action()` after rank 1's step `at_step` (and later ones)
    in attempt 1 only."""
    if train is None:
        from examples.keras_cnn import train

    if ctx.rank == 1 and ctx.attempt == 1:
        original = ctx.step_end

        def step_end(metrics=None, *, steps=1):
            original(metrics, steps=steps)
            if ctx.step >= at_step:
                action()

        ctx.step_end = step_end
    train(ctx)


def hang_on_rank1_first_attempt(ctx: raytf.TrainContext) -> None:
    """Rank 1 blocks forever at its 3rd step of attempt 1 (rank 0 then waits in the next step's all-reduce):
    paced_loop's steps, an all-reduce each (no model: the hang is the point)."""
    import threading

    _on_rank1_first_attempt(ctx, 3, lambda: threading.Event().wait(), train=paced_loop)


_HELD: list[bytes] = []


def leaks_on_rank1_first_attempt(ctx: raytf.TrainContext) -> None:
    """paced_loop, with rank 1's process holding 64 MiB more after each of its steps from step 3 on (at most 3 GiB),
    in attempt 1 only: a leak, for failure.max_task_rss_gb to recycle."""
    def grow():
        if len(_HELD) < 48:
            _HELD.append(b"x" * (64 << 20))  # (written, so resident: a bytearray's zero pages would not count)

    _on_rank1_first_attempt(ctx, 3, grow, train=paced_loop)


def fail_once_after_progress(ctx: raytf.TrainContext) -> None:
    """Rank 1 raises at its 5th step of attempt 1 only: a transient error worth a retry."""
    def fail():
        raise OSError("transient: the data server went away")

    _on_rank1_first_attempt(ctx, 5, fail)


def fail_once_with_a_bug_after_progress(ctx: raytf.TrainContext) -> None:
    """Rank 1 raises ValueError at its 5th step of attempt 1 only: the program's own error, not a transient one."""
    def fail():
        raise ValueError("a bug that shows at step 5")

    _on_rank1_first_attempt(ctx, 5, fail)


def print_then_train(ctx: raytf.TrainContext) -> None:
    """Prints, writes where programs write (a relative path: its working directory; its own log directory), then
    trains examples/keras_cnn.py's model: TensorFlow's start-up lines and a dataset come with it."""
    import os

    from examples.keras_cnn import train

    print(f"hello from {ctx.role} {ctx.rank}", flush=True)
    with open("notes.txt", "w") as f:  # relative: every task on this host would share the launch directory
        f.write(f"{ctx.role} {ctx.index} wrote this in {os.getcwd()}\n")
    with open(os.path.join(ctx.log_dir, "events.txt"), "w") as f:
        f.write(f"{ctx.role} {ctx.index}\n")
    train(ctx)


def where_from(ctx: raytf.TrainContext) -> None:
    """Says which copy of this module runs (a working_dir's, under the node's Ray directory), then reports."""
    import os

    print(f"running {os.path.abspath(__file__)}", flush=True)
    report_only(ctx)


def _paced(ctx: raytf.TrainContext, step, *, end_epoch=None) -> None:
    """Train with `step()` (returns the step's metrics) for the configured epochs, each step taking at least
    train.params.step_s seconds (a model with real compute), a checkpoint of a `weights` variable each epoch."""
    import time

    import tensorflow as tf

    step_s = float(ctx.params.get("step_s", 0.1))
    with ctx.strategy.scope():
        weights = tf.Variable(0.0)
    ctx.restore(weights=weights)
    run = step(weights)
    for _ in ctx.epoch_range():
        for _ in range(ctx.steps_per_epoch or 1):
            started = time.monotonic()
            metrics = run()
            time.sleep(max(0.0, step_s - (time.monotonic() - started)))  # the model's compute
            ctx.step_end(metrics)
        ctx.epoch_end({"weights": weights, **(end_epoch() if end_epoch else {})})


def ps_keras_held(ctx: raytf.TrainContext) -> None:
    """examples.ps_keras's Model.fit (ParameterServerStrategy) whose chief, in attempt 1, holds after its step
    train.params.hold_step until the file train.params.hold_file exists (the test makes it once it has killed a
    worker): the kill lands mid-run, however late the driver sees that step. With train.params.hold_epoch, it also
    holds at that epoch's end (its checkpoint saved) until the driver stops the attempt, which it does at that commit
    when it has decided to restart the group (a resize): a fast fit would otherwise end before the driver sees the
    commit. A driver that never stops it fails the attempt (_wait_for's TimeoutError)."""
    import tensorflow as tf

    from examples import ps_keras

    hold_step, own = int(ctx.params["hold_step"]), ctx.keras_callbacks
    hold_epoch = int(ctx.params.get("hold_epoch", 0))

    class Hold(tf.keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self.steps = 0
            self._supports_tf_logs = True  # (tf-keras's PS fit refuses batch callbacks without it; raytf's sets it)

        def on_train_batch_end(self, batch, logs=None):
            self.steps += 1
            if ctx.attempt == 1 and self.steps == hold_step:
                _wait_for(ctx.params["hold_file"], timeout_s=120.0)

        def on_epoch_end(self, epoch, logs=None):
            if ctx.attempt == 1 and epoch + 1 == hold_epoch:
                _wait_for(ctx.params["hold_file"] + ".never", timeout_s=120.0)  # (the driver's stop ends it)

    ctx.keras_callbacks = lambda: [*own(), Hold()]  # after raytf's callback: the step's row is sent first
    ps_keras.train(ctx)


def _wait_for(path: str, timeout_s: float) -> None:
    """Until `path` exists (the test's signal), polled; a TimeoutError after timeout_s (a test that never sends it
    fails, never hangs)."""
    import os
    import time

    deadline = time.monotonic() + timeout_s
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path} did not appear within {timeout_s:.0f}s")
        time.sleep(0.05)


def paced_loop(ctx: raytf.TrainContext) -> None:
    """A MultiWorkerMirroredStrategy custom loop with an all-reduce across the workers each step (_paced): a run
    long enough to cut a host off in the middle of. Prints its TF_CONFIG first."""
    import os

    import tensorflow as tf

    print(f"TF_CONFIG {os.environ.get('TF_CONFIG')}", flush=True)

    def make(weights):
        @tf.function
        def step():
            def replica():
                return tf.distribute.get_replica_context().all_reduce("sum", tf.constant(1.0))

            return ctx.strategy.reduce("sum", ctx.strategy.run(replica), axis=None)

        def run():
            replicas = step()
            weights.assign_add(1.0)
            return {"replicas": replicas, "global_batch": float(ctx.global_batch_size)}

        return run

    _paced(ctx, make)


def paced_ps(ctx: raytf.TrainContext) -> None:
    """ParameterServerStrategy's chief (_paced): each step one function scheduled on whichever worker is free (it
    updates a variable on the ps), joined each epoch. A lost worker's functions are rescheduled on the others by
    TF's ClusterCoordinator; a lost ps fails the chief."""
    import tensorflow as tf

    scheduled = []

    def make(weights):
        @tf.function
        def step():
            weights.assign_add(1.0)
            return weights.read_value()

        def run():
            scheduled.append(ctx.coordinator.schedule(step))
            return None

        return run

    def end_epoch():
        ctx.coordinator.join()
        last = float(scheduled[-1].fetch())
        scheduled.clear()
        return {"last": last}

    _paced(ctx, make, end_epoch=end_epoch)


def keras_iterations(ctx: raytf.TrainContext) -> None:
    """Keras Model.fit on a small model that reports its optimizer's iteration count with every epoch row;
    `extra_layers` Dense(1) layers after its own (a changed model, for a relaunch). train.params.keras="keras":
    the same program written for Keras 3 (`import keras`)."""
    import importlib

    import numpy as np
    import tensorflow as tf

    keras = importlib.import_module(ctx.params["keras"]) if "keras" in ctx.params else tf.keras
    rng = np.random.default_rng(ctx.seed)
    x = rng.normal(size=(512, 8)).astype("float32")
    y = (x.sum(axis=1) > 0).astype("float32")
    with ctx.strategy.scope():
        extra = [keras.layers.Dense(1) for _ in range(int(ctx.params.get("extra_layers", 0)))]
        model = keras.Sequential([keras.layers.Input(shape=(8,)), keras.layers.Dense(1), *extra])
        model.compile(optimizer=keras.optimizers.SGD(0.01), loss="mse")
    ctx.restore(model=model, optimizer=model.optimizer)

    class Iterations(keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            logs["iterations"] = float(model.optimizer.iterations.numpy())

    ds = tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(ctx.global_batch_size)
    model.fit(ds, epochs=ctx.epochs, initial_epoch=ctx.initial_epoch, steps_per_epoch=ctx.steps_per_epoch,
              callbacks=[Iterations(), *ctx.keras_callbacks()], verbose=0)


def fit_then_fine_tune(ctx: raytf.TrainContext) -> None:
    """The blog examples' shape in a training function: fit, then a second fit to fine-tune (one more epoch)."""
    import numpy as np
    import tensorflow as tf

    rng = np.random.default_rng(0)
    x, y = rng.random((256, 8), dtype=np.float32), rng.integers(0, 4, 256)
    data = tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(ctx.global_batch_size)
    with ctx.strategy.scope():
        model = tf.keras.Sequential([tf.keras.layers.Dense(8, activation="relu"), tf.keras.layers.Dense(4)])
        model.compile(tf.keras.optimizers.SGD(0.1), tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    ctx.restore(model=model, optimizer=model.optimizer)
    model.fit(data, epochs=ctx.epochs, initial_epoch=ctx.initial_epoch, steps_per_epoch=ctx.steps_per_epoch,
              callbacks=ctx.keras_callbacks(), verbose=0)
    model.fit(data, epochs=1, steps_per_epoch=ctx.steps_per_epoch, callbacks=ctx.keras_callbacks(), verbose=0)


def steps_until_told(ctx: raytf.TrainContext) -> None:
    """Steps of train.params.step_s seconds (a batch from a tf.data iterator each), a checkpoint after the 4th, until
    the file train.params.stop_file exists (at most train.params.max_steps steps): a run that lasts as long as its
    test needs. No collective after the checkpoint, so the ranks may stop at different steps."""
    import os
    import time

    import tensorflow as tf

    step_s = float(ctx.params.get("step_s", 0.05))
    with ctx.strategy.scope():
        weights = tf.Variable(0.0)
    ctx.restore(weights=weights)
    batches = iter(tf.data.Dataset.range(10**9))
    for step in range(1, int(ctx.params.get("max_steps", 1000)) + 1):
        if step > 4 and os.path.exists(ctx.params["stop_file"]):
            break
        started = time.monotonic()
        value = float(next(batches))
        time.sleep(max(0.0, step_s - (time.monotonic() - started)))  # the model's compute
        ctx.step_end({"value": value})
        if step == 4:  # (every rank: the save is collective)
            ctx.save()


def keras_straggler(ctx: raytf.TrainContext) -> None:
    """Keras Model.fit under MWMS where rank train.params.slow_rank is slow by train.params.delay_s a step: in its
    input pipeline (train.params.slow=input: a map that waits before each batch) or in its compute
    (slow=compute: the forward pass waits). The other ranks wait for it in the all-reduce."""
    import time

    import numpy as np
    import tensorflow as tf

    slow_here = ctx.rank == int(ctx.params.get("slow_rank", 1))
    delay = float(ctx.params.get("delay_s", 0.1)) if slow_here else 0.0
    where = ctx.params.get("slow", "input")

    def wait(x):
        time.sleep(delay)  # the slow part's own work (a decoder, a remote read; a big layer)
        return x

    rng = np.random.default_rng(ctx.seed)
    x = rng.normal(size=(256, 8)).astype("float32")
    y = (x.sum(axis=1) > 0).astype("float32")
    ds = tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(ctx.global_batch_size)
    if where == "input" and delay:
        ds = ds.map(lambda a, b: (tf.py_function(wait, [a], tf.float32), b))
        ds = ds.map(lambda a, b: (tf.ensure_shape(a, [None, 8]), b))
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
    ds = ds.with_options(options)

    class Slow(tf.keras.layers.Layer):
        def call(self, inputs):
            if where != "compute" or not delay:
                return inputs
            waited = tf.py_function(lambda: wait(np.float32(0.0)), [], tf.float32)
            waited.set_shape([])  # (py_function's output has no static shape: Dense needs the last dimension)
            return inputs + 0.0 * waited

    with ctx.strategy.scope():
        model = tf.keras.Sequential([tf.keras.layers.Input(shape=(8,)), Slow(), tf.keras.layers.Dense(1)])
        model.compile(optimizer=tf.keras.optimizers.SGD(0.01), loss="mse")
    ctx.restore(model=model, optimizer=model.optimizer)
    model.fit(ds, epochs=ctx.epochs, initial_epoch=ctx.initial_epoch, steps_per_epoch=ctx.steps_per_epoch,
              callbacks=ctx.keras_callbacks(), verbose=0)


def fail_when_told(ctx: raytf.TrainContext) -> None:
    """Steps of train.params.step_s seconds with an all-reduce each (every rank), a checkpoint each epoch; in attempt 1,
    rank 1 SIGKILLs itself once the file train.params.fail_file exists (the test creates it when it is ready for
    the failure). Reports the process id it ran in with its first step row (`pid`)."""
    import os
    import signal
    import time

    import tensorflow as tf

    step_s = float(ctx.params.get("step_s", 0.05))
    with ctx.strategy.scope():
        weights = tf.Variable(0.0)
    ctx.restore(weights=weights)

    @tf.function
    def step():
        return ctx.strategy.run(lambda: tf.distribute.get_replica_context().all_reduce("sum", tf.constant(1.0)))

    for _ in ctx.epoch_range():
        for _ in range(ctx.steps_per_epoch or 1):
            step()
            if ctx.rank == 1 and ctx.attempt == 1 and os.path.exists(ctx.params["fail_file"]):
                os.kill(os.getpid(), signal.SIGKILL)  # a worker killed (OOM killer, a crash): a retried failure
            time.sleep(step_s)  # the model's compute (the same on every rank: none is slower)
            ctx.step_end({"pid": float(os.getpid())})
        weights.assign_add(1.0)
        ctx.epoch_end({"weights": weights})


def ray_data_loop(ctx: raytf.TrainContext) -> None:
    """Ray Data input in a custom loop (datasets={"train": rows of id, x, y}): linear regression, every replica's
    ids written per attempt and epoch to params.ids_dir (ids-a<attempt>-e<epoch>-r<rank>.json, with the
    per-replica batch sizes seen). params.fail_at: [epoch, step] where rank 1 of attempt 1 exits (a lost task)."""
    import json
    import os

    import numpy as np
    import tensorflow as tf

    strategy = ctx.strategy
    with strategy.scope():
        w = tf.Variable(tf.zeros([4, 1]), name="w")
        b = tf.Variable(0.0, name="b")
        opt = tf.keras.optimizers.SGD(0.05)
    ctx.restore(w=w, b=b, optimizer=opt)
    dist = strategy.experimental_distribute_dataset(ctx.dataset("train", ["id", "x"], "y"))
    global_batch = ctx.global_batch_size

    @tf.function
    def step(features, y):
        def replica(features, y):
            with tf.GradientTape() as tape:
                pred = tf.squeeze(tf.matmul(tf.cast(features["x"], tf.float32), w), 1) + b
                loss = tf.reduce_sum(tf.square(pred - tf.cast(y, tf.float32))) / global_batch
            grads = tape.gradient(loss, [w, b])
            opt.apply_gradients(zip(grads, [w, b]))
            return loss, features["id"]

        loss, ids = strategy.run(replica, args=(features, y))
        return strategy.reduce(tf.distribute.ReduceOp.SUM, loss, axis=None), ids

    fail_at = ctx.params.get("fail_at")
    for epoch in ctx.epoch_range():
        seen, sizes, losses = [], [], []
        for features, y in dist:
            loss, ids = step(features, y)
            local = [t.numpy() for t in strategy.experimental_local_results(ids)]
            seen += [int(i) for part in local for i in part]
            sizes += [len(part) for part in local]
            losses.append(float(loss))
            ctx.step_end({"loss": losses[-1]})
            if fail_at and ctx.attempt == 1 and ctx.rank == 1 and [epoch, len(losses)] == list(fail_at):
                os._exit(3)
        with open(os.path.join(ctx.params["ids_dir"], f"ids-a{ctx.attempt}-e{epoch}-r{ctx.rank}.json"), "w") as f:
            json.dump({"ids": seen, "sizes": sizes, "replicas": ctx.num_replicas}, f)
        ctx.epoch_end({"loss": float(np.mean(losses))})


def keras_on_train_dataset(ctx: raytf.TrainContext) -> None:
    """Keras fit on ctx.dataset(ctx.params['dataset']) (what a run was given or not)."""
    from examples.ray_data import train

    if ctx.params.get("dataset", "train") != "train":
        ctx.dataset(ctx.params["dataset"], "pixels", "label")
    train(ctx)


def datasets_that_raise(cfg) -> dict:
    """A train.datasets function that fails (its source is missing)."""
    raise FileNotFoundError("s3://bucket/missing/ does not exist")


def datasets_not_a_mapping() -> list:
    return []


def big_checkpoints(ctx: raytf.TrainContext) -> None:
    """A custom loop whose checkpoint is train.params.mib MiB (one float32 variable), one per epoch: a run that fills
    a small disk a checkpoint at a time."""
    import tensorflow as tf

    with ctx.strategy.scope():
        weights = tf.Variable(tf.zeros([int(float(ctx.params.get("mib", 1)) * 262144)]))
    ctx.restore(weights=weights)
    for _ in ctx.epoch_range():
        for _ in range(ctx.steps_per_epoch or 1):
            weights.assign_add(tf.ones_like(weights))
            ctx.step_end()
        ctx.epoch_end()


def keras3_fit(ctx: raytf.TrainContext) -> None:
    """A training function written for Keras 3 (`import keras`): a small classifier on fixed data (256 rows, global
    batch 32, train.params.seed), fit with ctx.keras_callbacks() and resumed through ctx.restore. Each rank writes
    exact.json to ctx.log_dir: its final weights, evaluate's loss, and its predictions of the first 8 rows, and
    saves the model (model.keras) there too. With train.params.shared_dir, every rank's ModelCheckpoint writes one
    path there, as a program on a shared filesystem does (raytf issue 72: a worker's own saves kept apart). With
    train.params.batch_norm ("local" or "sync") a BatchNormalization layer; train.params.steps_per_execution for
    its refusal. For benchmarks/keras3.py: train.params.keras="tf_keras" trains the same with tf-keras, and
    train.params.steps_per_epoch=0 leaves fit's steps_per_epoch unset (the data not repeated); exact.json has the
    fit's time and each epoch's."""
    import importlib
    import json
    import os
    import time

    import numpy as np
    import tensorflow as tf

    keras = importlib.import_module(ctx.params.get("keras", "keras"))

    keras.utils.set_random_seed(int(ctx.params.get("seed", 1)))
    rng = np.random.default_rng(0)
    x = rng.random((256, 8)).astype("float32")
    y = (x.sum(1, keepdims=True) > 4).astype("float32")
    with ctx.strategy.scope():
        layers = [keras.Input((8,)), keras.layers.Dense(16, activation="relu")]
        if ctx.params.get("batch_norm"):
            layers.append(keras.layers.BatchNormalization(synchronized=ctx.params["batch_norm"] == "sync"))
        model = keras.Sequential([*layers, keras.layers.Dense(1)])
        model.compile(keras.optimizers.SGD(0.1), keras.losses.BinaryCrossentropy(from_logits=True),
                      metrics=["accuracy"], steps_per_execution=int(ctx.params.get("steps_per_execution", 1)))
    initial_epoch = ctx.restore(model=model)
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    steps = int(ctx.params.get("steps_per_epoch", 8))
    ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(32)
    ds = (ds.repeat() if steps else ds).with_options(options)
    ended: list[float] = []
    callbacks = [*ctx.keras_callbacks(), keras.callbacks.LambdaCallback(
        on_epoch_end=lambda epoch, logs: ended.append(time.perf_counter()))]
    if "shared_dir" in ctx.params:
        callbacks.append(keras.callbacks.ModelCheckpoint(os.path.join(ctx.params["shared_dir"], "model.keras")))
    began = time.perf_counter()
    model.fit(ds, epochs=ctx.cfg.train.epochs, initial_epoch=initial_epoch, steps_per_epoch=steps or None,
              callbacks=callbacks, verbose=0)
    fit_s = time.perf_counter() - began
    evaluated = model.evaluate(ds, steps=8, verbose=0, return_dict=True)
    out = {"weights": [w.numpy().tolist() for w in model.weights], "loss": evaluated["loss"],
           "predicted": model.predict(x[:8], verbose=0).tolist(), "fit_s": fit_s,
           "epoch_s": np.diff([began, *ended]).tolist()}
    with open(os.path.join(ctx.log_dir, "exact.json"), "w") as f:
        json.dump(out, f)
    model.save(os.path.join(ctx.log_dir, "model.keras"))  # (each rank in its own directory)


def dumps_a_tensor(ctx: raytf.TrainContext) -> None:
    """Rank 1 fails with a message that dumps a batch, as TF's own errors do (a PerReplica's values)."""
    import tensorflow as tf

    if ctx.rank == 1:
        raise ValueError(f"Attempt to convert a value ({tf.random.uniform((16, 28, 28))!r}) with an unsupported "
                         "type to a Tensor.")
    fail_on_rank1(ctx)


def random_draws(ctx: raytf.TrainContext) -> None:
    """One draw from each global generator a program uses unseeded: numpy's, Python's and TensorFlow's (its op seed
    drawn by the runtime), reported by every rank with each step; `train.params.seed` set: after
    tf.keras.utils.set_random_seed(seed), which seeds all three (raytf issue 70: forked processes shared numpy's).
    With train.params.go_file, every rank holds after its first step until that file exists, rank 0 having made
    train.params.started_file: a run surely training while its test does something to the session."""
    import os
    import random

    import numpy as np
    import tensorflow as tf

    if "seed" in ctx.params:
        tf.keras.utils.set_random_seed(int(ctx.params["seed"]))
    draws = {"np": float(np.random.rand()), "py": random.random(), "tf": float(tf.random.uniform([])),
             "pid": float(os.getpid())}

    @tf.function
    def step():  # (a collective each step: the ranks train together, as a real run's do)
        return ctx.strategy.run(lambda: tf.distribute.get_replica_context().all_reduce("sum", tf.constant(1.0)))

    for _ in ctx.epoch_range():
        for i in range(ctx.steps_per_epoch or 1):
            step()
            ctx.step_end(draws)
            if i == 0 and "go_file" in ctx.params:
                if ctx.rank == 0:
                    open(ctx.params["started_file"], "w").close()
                _wait_for(ctx.params["go_file"], 120)


def many_names(ctx: raytf.TrainContext) -> None:
    """No model: every step row reports `names` metrics (metric_0 ...), as a program logging per-class or per-layer
    figures does (benchmarks/wide_metrics.py)."""
    names = [f"metric_{i}" for i in range(int(ctx.params.get("names", 10000)))]
    for epoch in ctx.epoch_range():
        for step in range(ctx.steps_per_epoch or 1):
            ctx.step_end({n: float(epoch * 1000 + step + i) for i, n in enumerate(names)})
        ctx.epoch_end({"value": float(epoch)})
