"""The benchmark's one TensorFlow program, shared by every contender so they differ only in how it is launched.

- by hand, N processes with TF_CONFIG (the seeds' way), and under raytf's train.script: run as a script,
  `python benchmarks/workload.py --out DIR [--epochs E --steps S --batch B]`;
- as a raytf training function: `benchmarks.workload:train` (ctx.params: out, and the same knobs);
- as Ray Train's train_loop_per_worker: `ray_train_loop`.

Every process writes `DIR/timing-<rank>.json`: when its first step ended (wall clock, compared with the
launcher's start), each step's duration, each epoch's duration, and its peak RSS; and `marks`, the wall-clock
times of its own start-up (process start, its training code begun (`code_start`, any launcher), TensorFlow's import
begun and done, strategy built: where this program builds them, i.e. by hand, a script, Ray Train) and of training's
end, for the cold-launch timeline
(benchmarks/run.py). TensorFlow is imported lazily: the launcher imports this module without paying for it.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import time

# Wall-clock marks of this process's start-up (see the module's doc): filled as it goes, written with the timing.
MARKS: dict[str, float] = {}

IMAGE = 28
CLASSES = 10
EXAMPLES = 8192


def _data(seed: int = 0):
    import numpy as np

    rng = np.random.default_rng(seed)
    patterns = rng.random((CLASSES, IMAGE, IMAGE, 1), dtype=np.float32)
    y = rng.integers(0, CLASSES, size=EXAMPLES)
    x = patterns[y] + 0.3 * rng.standard_normal((EXAMPLES, IMAGE, IMAGE, 1)).astype(np.float32)
    return x, y


def _process_start() -> float | None:
    """This process's start (wall clock), from /proc (field 22 of its stat line: clock ticks after boot); None
    without /proc. Not raytf's reader: the hand-launched floor must not pay for importing raytf."""
    try:
        with open(f"/proc/{os.getpid()}/stat") as f:
            ticks = int(f.read().rsplit(")", 1)[1].split()[19])
        boot = time.time() - time.clock_gettime(time.CLOCK_BOOTTIME)  # (/proc/stat's btime: whole seconds)
        return boot + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, AttributeError, ValueError, IndexError):
        return None


def build_model(tf):
    model = tf.keras.Sequential([
        tf.keras.layers.InputLayer(input_shape=(IMAGE, IMAGE, 1)),
        tf.keras.layers.Conv2D(16, 3, activation="relu"),
        tf.keras.layers.MaxPooling2D(),
        tf.keras.layers.Conv2D(32, 3, activation="relu"),
        tf.keras.layers.Flatten(),
        tf.keras.layers.Dense(64, activation="relu"),
        tf.keras.layers.Dense(CLASSES),
    ])
    model.compile(optimizer=tf.keras.optimizers.SGD(0.01),
                  loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
    return model


def dataset(tf, global_batch: int):
    x, y = _data()
    ds = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(EXAMPLES, seed=0).repeat().batch(global_batch)
    options = tf.data.Options()
    # In-memory tensors have no files to shard by: each worker keeps its share of every global batch.
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    return ds.with_options(options).prefetch(2)


def timer(tf, out_dir: str, rank: int, *, sync_each_step: bool = True, spent: list[float] | None = None):
    """A callback timing every step (end to end, so other callbacks' costs count) and every epoch; `spent`
    (seconds inside raytf's callbacks, kept by `timed`) is recorded for the window after epoch 1."""

    class StepTimer(tf.keras.callbacks.Callback):
        def __init__(self) -> None:
            super().__init__()
            # Under ParameterServerStrategy reading each step's logs would serialize the asynchronous
            # steps; there only the epoch times count.
            self._supports_tf_logs = not sync_each_step
            self.first_step_at = None
            self.steps: list[float] = []
            self.epochs: list[float] = []
            self._last = self._epoch0 = None
            self._epoch_ends: list[float] = []
            self._spent0 = 0.0

        def on_epoch_begin(self, epoch, logs=None) -> None:
            self._epoch0 = time.perf_counter()

        def on_train_batch_end(self, batch, logs=None) -> None:
            now = time.perf_counter()
            if self.first_step_at is None:
                self.first_step_at = time.time()
            elif self._last is not None:
                self.steps.append(now - self._last)
            self._last = now

        def on_epoch_end(self, epoch, logs=None) -> None:
            now = time.perf_counter()
            self.epochs.append(now - self._epoch0)
            self._epoch_ends.append(now)
            if len(self._epoch_ends) == 1 and spent:
                self._spent0 = spent[0]
            self._last = None  # the gap across an epoch boundary (checkpoint, eval) is not a step

        def on_train_end(self, logs=None) -> None:
            MARKS["train_end"] = time.time()
            MARKS.setdefault("process_start", _process_start())
            # After epoch 1, per step, end to end: includes what other callbacks do at epoch ends (saves).
            spe, done = self.params.get("steps") or 0, len(self._epoch_ends)
            steady = ((time.perf_counter() - self._epoch_ends[0]) / (spe * (done - 1))
                      if spe and done > 1 else None)
            os.makedirs(out_dir, exist_ok=True)
            with open(os.path.join(out_dir, f"timing-{rank}.json"), "w") as f:
                json.dump({"rank": rank, "pid": os.getpid(), "first_step_at": self.first_step_at,
                           "step_s": self.steps, "epoch_s": self.epochs, "steady_s": steady,
                           "steps_per_epoch": self.params.get("steps"), "marks": MARKS,
                           # raytf's own callbacks (metrics, heartbeats, checkpoint writes) in the steady window
                           "raytf_s": ((spent[0] - self._spent0) / (spe * (done - 1))
                                       if spent is not None and spe and done > 1 else None),
                           "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}, f)

    return StepTimer()


def timed(tf, callbacks: list, spent: list[float]) -> list:
    """Wrap callbacks so the seconds spent inside them add up in spent[0]: the in-loop cost of what raytf does
    (an end-to-end comparison between runs cannot resolve a few percent on a noisy machine)."""
    hooks = ("on_train_begin", "on_train_end", "on_epoch_begin", "on_epoch_end", "on_train_batch_begin",
             "on_train_batch_end", "on_test_begin", "on_test_end", "on_test_batch_begin", "on_test_batch_end")

    class Timed(tf.keras.callbacks.Callback):
        def __init__(self, inner) -> None:
            super().__init__()
            self.inner = inner
            self._supports_tf_logs = getattr(inner, "_supports_tf_logs", False)

        def set_model(self, model) -> None:
            super().set_model(model)
            self.inner.set_model(model)

        def set_params(self, params) -> None:
            super().set_params(params)
            self.inner.set_params(params)

    def make(name):
        def hook(self, *args, **kwargs):
            t = time.perf_counter()
            try:
                return getattr(self.inner, name)(*args, **kwargs)
            finally:
                spent[0] += time.perf_counter() - t
        return hook

    for name in hooks:
        setattr(Timed, name, make(name))
    return [Timed(cb) for cb in callbacks]


def _threads(tf) -> None:
    # By hand, as raytf does for its tasks: one core per worker on this 2-core machine.
    n = int(os.environ.get("BENCH_THREADS", "1"))
    tf.config.threading.set_intra_op_parallelism_threads(n)
    tf.config.threading.set_inter_op_parallelism_threads(n)


def fit_mwms(*, out: str, rank: int, epochs: int, steps: int, batch: int, strategy=None, callbacks=(),
             initial_epoch: int = 0) -> None:
    """MWMS training with a per-replica `batch`; `strategy` None builds one from TF_CONFIG."""
    MARKS.setdefault("code_start", time.time())  # the program's training code began (benchmarks/recovery.py)
    MARKS["tf_import_start"] = time.time()
    import tensorflow as tf

    MARKS["tf_imported"] = time.time()
    if strategy is None:
        _threads(tf)
        strategy = tf.distribute.MultiWorkerMirroredStrategy()
        MARKS["strategy_ready"] = time.time()
    with strategy.scope():
        model = build_model(tf)
    ds = dataset(tf, batch * strategy.num_replicas_in_sync)
    model.fit(ds, epochs=epochs, steps_per_epoch=steps, initial_epoch=initial_epoch, verbose=0,
              callbacks=[timer(tf, out, rank), *callbacks])


def train(ctx) -> None:
    """raytf training function: MWMS (any strategy raytf builds) or ParameterServerStrategy (chief)."""
    MARKS.setdefault("code_start", time.time())
    import tensorflow as tf

    p = ctx.params
    out = p["out"]
    if ctx.cfg.cluster.strategy.value == "parameter_server":
        _train_ps(ctx, tf, out)
        return
    with ctx.strategy.scope():
        model = build_model(tf)
    if ctx.cfg.checkpoint.every_epochs or ctx.cfg.checkpoint.every_steps:
        ctx.restore(model=model, optimizer=model.optimizer)
    ds = dataset(tf, ctx.global_batch_size)
    spent = [0.0]
    model.fit(ds, epochs=ctx.epochs, initial_epoch=ctx.initial_epoch, steps_per_epoch=ctx.steps_per_epoch,
              verbose=0, callbacks=[timer(tf, out, ctx.rank, spent=spent), *timed(tf, ctx.keras_callbacks(), spent)])


def train_killed_once(ctx) -> None:
    """`train`, where rank 1 of attempt 1 SIGKILLs itself once the file train.params.kill_file exists (the recovery
    benchmark, benchmarks/recovery.py, creates it when it wants the failure)."""
    if ctx.rank == 1 and ctx.attempt == 1:
        _kill_when_told(ctx.params["kill_file"])
    train(ctx)


def _kill_when_told(kill_file: str) -> None:
    """This process SIGKILLs itself once `kill_file` exists (a worker killed: the OOM killer, a crash)."""
    import signal
    import threading
    import time

    def kill_when_told():
        while not os.path.exists(kill_file):
            time.sleep(0.05)  # polling for the benchmark's go, on a thread of its own
        os.kill(os.getpid(), signal.SIGKILL)

    threading.Thread(target=kill_when_told, daemon=True).start()


def _train_ps(ctx, tf, out: str) -> None:
    x, y = _data()
    batch = ctx.batch_size  # one batch per step, on whichever worker runs it

    def dataset_fn(input_context):
        ds = tf.data.Dataset.from_tensor_slices((x, y)).shard(input_context.num_input_pipelines,
                                                              input_context.input_pipeline_id)
        return ds.shuffle(EXAMPLES, seed=0).repeat().batch(batch).prefetch(2)

    with ctx.strategy.scope():
        model = build_model(tf)
    if ctx.cfg.checkpoint.every_epochs or ctx.cfg.checkpoint.every_steps:
        ctx.restore(model=model, optimizer=model.optimizer)
    model.fit(tf.keras.utils.experimental.DatasetCreator(dataset_fn), epochs=ctx.epochs,
              initial_epoch=ctx.initial_epoch, steps_per_epoch=ctx.steps_per_epoch, verbose=0,
              callbacks=[timer(tf, out, ctx.rank, sync_each_step=False), *ctx.keras_callbacks()])


def ray_train_loop(config: dict) -> None:
    """Ray Train's train_loop_per_worker: TF_CONFIG is set by its TensorflowConfig backend."""
    import ray.train

    fit_mwms(out=config["out"], rank=ray.train.get_context().get_world_rank(), epochs=config["epochs"],
             steps=config["steps"], batch=config["batch"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--batch", type=int, default=64, help="per replica")
    ap.add_argument("--kill-file", default="", help="launched by raytf: rank 1 of attempt 1 SIGKILLs itself once "
                                                     "it exists (benchmarks/recovery.py --script)")
    a = ap.parse_args()
    task = json.loads(os.environ["TF_CONFIG"])["task"]
    if a.kill_file and os.environ.get("RAYTF_RANK") == "1" and os.environ.get("RAYTF_ATTEMPT") == "1":
        _kill_when_told(a.kill_file)
    fit_mwms(out=a.out, rank=int(task["index"]), epochs=a.epochs, steps=a.steps, batch=a.batch)


if __name__ == "__main__":
    main()
