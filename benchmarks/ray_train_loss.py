"""The same regression program through Ray Train and through raytf, side by side on one Ray (issue 35): where the
~0.25 higher loss of a `ctx.dataset` port came from, and that it goes away when the batch means the same.

Run:  python -m benchmarks.ray_train_loss [--rows 4096] [--epochs 4] [--seeds 3]
      python -m benchmarks.ray_train_loss --smoke      (one short round of each: the CI check that it runs)

The program is Ray's tensorflow_regression_example (ray/train/examples/tf/, Ray 2.60): 100 features concatenated
into "x", Dense(10) then Dense(1), SGD at lr 1e-3, mean absolute error, to_tf(batch_size=32) on each worker's
share, one Model.fit per epoch with ReportCheckpointCallback, 2 MultiWorkerMirroredStrategy workers. Its S3 CSV is
replaced by synthetic rows of the same shape (y = x.w + noise, fixed seed), and its model's initial weights are
seeded (the example leaves them random: runs of it differ by their draw alone), the same seed for every contender
of a round; the rounds use different seeds, which is the noise the table shows. The contenders:

- `ray_train`: Ray Train's own TensorflowTrainer.
- `compat`: the same program with `from raytf.compat import TensorflowTrainer` (raytf's one-line switch).
- `ctx_32`: raytf's training function reading `ctx.dataset("train", "x", "y", batch_size=32)`: the port that
  keeps the example's number.
- `ctx_16`: the same with `batch_size=16`, the per-replica batch that means what the example's 32 means.

Why they differ: `DataIterator.to_tf(batch_size=B)` yields B rows per element, and tf.distribute takes a dataset
element as the *global* batch, split among num_replicas_in_sync (Ray's to_tf turns auto-sharding off, so each
worker keeps all of its share's elements). Under Ray Train, B=32 on 2 workers is 16 rows per replica per step,
32 per step in all. raytf's `ctx.dataset(batch_size=...)` is per replica, like train.batch_size: batch_size=32 makes
elements of 32 x 2 = 64 rows, 32 per replica, 64 per step. Each worker reads its whole share every epoch in both, so
the `ctx_32` port takes half as many optimizer steps per epoch, of twice the batch, at the same learning rate: after
the same epochs it is behind. `ctx_16` (or `compat`, which runs the program's own to_tf) takes Ray Train's steps.
The share each worker reads (streaming_split(2, equal=True)), the absence of shuffling and the learning rate (no
scaling: both are at full size) are the same in all four.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
FEATURES = 100
CONTENDERS = ("ray_train", "compat", "ctx_32", "ctx_16")
TF_ENV = {"TF_USE_LEGACY_KERAS": "1", "TF_CPP_MIN_LOG_LEVEL": "2"}


def regression_rows(rows: int):
    """The example's CSV, synthetic: x000..x099 and y (a fixed linear function of x, plus noise), as a Ray dataset
    whose features the example's Concatenator puts into one "x" column."""
    import pandas as pd
    import ray
    from ray.data.preprocessors import Concatenator

    rng = np.random.default_rng(0)
    x = rng.normal(size=(rows, FEATURES))
    frame = pd.DataFrame(x, columns=[f"x{i:03}" for i in range(FEATURES)])
    frame["y"] = x @ rng.normal(size=FEATURES) / 4 + rng.normal(scale=0.1, size=rows)
    return Concatenator(columns=[f"x{i:03}" for i in range(FEATURES)], output_column_name="x").fit_transform(
        ray.data.from_pandas(frame))


def build_model(seed: int):
    """The example's model, its initial weights drawn from `seed` (the same on every contender of a round)."""
    import tensorflow as tf

    init = tf.keras.initializers.GlorotUniform
    return tf.keras.Sequential([tf.keras.layers.InputLayer(input_shape=(FEATURES,)),
                                tf.keras.layers.Dense(10, kernel_initializer=init(seed)),
                                tf.keras.layers.Dense(1, kernel_initializer=init(seed + 1))])


def compile_model(model, lr: float) -> None:
    import tensorflow as tf

    model.compile(optimizer=tf.keras.optimizers.SGD(learning_rate=lr), loss=tf.keras.losses.mean_absolute_error,
                  metrics=[tf.keras.metrics.mean_squared_error])


def _steps_callback():
    """Adds `steps` (this epoch's optimizer steps) and `rows` (rows this worker trained on) to the epoch's logs,
    before the callbacks after it report them."""
    import tensorflow as tf

    class Steps(tf.keras.callbacks.Callback):
        def on_epoch_begin(self, epoch, logs=None):
            self.steps = 0

        def on_train_batch_end(self, batch, logs=None):
            self.steps += 1

        def on_epoch_end(self, epoch, logs=None):
            if logs is not None:
                logs["steps"] = float(self.steps)

    return Steps()


def ray_train_loop(config: dict) -> None:
    """The example's train_func (a seeded model, a steps count): run by Ray Train and by raytf.compat alike."""
    import tensorflow as tf
    from ray import train
    from ray.train.tensorflow.keras import ReportCheckpointCallback

    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    with strategy.scope():
        model = build_model(config["seed"])
        compile_model(model, config["lr"])
    dataset = train.get_dataset_shard("train")
    for _ in range(config["epochs"]):
        tf_dataset = dataset.to_tf(feature_columns="x", label_columns="y", batch_size=config["batch_size"])
        model.fit(tf_dataset, callbacks=[_steps_callback(), ReportCheckpointCallback()], verbose=0)


def raytf_function(ctx) -> None:
    """The raytf port: ctx.dataset with the per-replica batch in train.params.batch_size."""
    p = ctx.params
    with ctx.strategy.scope():
        model = build_model(p["seed"])
        compile_model(model, p["lr"])
    data = ctx.dataset("train", "x", "y", batch_size=p["batch_size"])
    model.fit(data, epochs=ctx.epochs, callbacks=[_steps_callback(), *ctx.keras_callbacks()], verbose=0)


def one(contender: str, a, seed: int, scratch: Path) -> dict:
    """One run: rank 0's loss after each epoch, its steps per epoch, the wall time."""
    from ray.train import RunConfig, ScalingConfig

    import raytf

    name = f"{contender}-s{seed}"
    config = {"lr": a.lr, "batch_size": a.batch, "epochs": a.epochs, "seed": seed}
    row: dict = {"contender": contender, "seed": seed}
    t0 = time.monotonic()
    try:
        if contender in ("ray_train", "compat"):
            if contender == "ray_train":
                from ray.train.tensorflow import TensorflowTrainer
                extra = {}
            else:
                from raytf.compat import TensorflowTrainer
                extra = {"raytf_config": ["cluster.standby=0"]}
            trainer = TensorflowTrainer(
                ray_train_loop, train_loop_config=config, datasets={"train": regression_rows(a.rows)},
                scaling_config=ScalingConfig(num_workers=2, resources_per_worker={"CPU": 1}),
                run_config=RunConfig(name=name, storage_path=str(scratch), worker_runtime_env={"env_vars": TF_ENV}),
                **extra)
            epochs = trainer.fit().metrics_dataframe
        else:
            per_replica = a.batch if contender == "ctx_32" else a.batch // 2
            cfg = raytf.load_config(ROOT / "conf/local.yaml", [
                f"storage.path={scratch}", f"run.name={name}", f"train.epochs={a.epochs}", "train.steps_per_epoch=null",
                "cluster.standby=0", "checkpoint.every_epochs=0", "checkpoint.export_model=false"])
            cfg = raytf.load_config(cfg, {"train.params": {**config, "batch_size": per_replica}})
            result = raytf.fit(cfg, quiet=True, train_fn=raytf_function, datasets={"train": regression_rows(a.rows)})
            df = result.metrics
            epochs = df[(df["kind"] == "epoch") & (df["rank"] == 0)].sort_values("epoch")
        row["loss"] = [float(v) for v in epochs["loss"]]
        row["steps"] = int(epochs["steps"].iloc[0])
    except Exception as e:  # a row of the table, not a crash of the whole benchmark
        row["error"] = f"{type(e).__name__}: {e}"[:300]
    row["wall_s"] = time.monotonic() - t0
    return row


def table(rows: list[dict], rows_per_worker: int) -> str:
    ok = [r for r in rows if "error" not in r]
    base = [r for r in ok if r["contender"] == "ray_train"]
    epochs = max((len(r["loss"]) for r in ok), default=0)
    head = ("| contender | steps/epoch | rows/step (all workers) | " + " | ".join(
        f"loss e{e + 1}" for e in range(epochs)) + " | final - Ray Train's (per seed) |")
    lines = [head, "|" + "---|" * (epochs + 4)]
    for c in CONTENDERS:
        mine = [r for r in ok if r["contender"] == c]
        if not mine:
            continue
        steps = mine[0]["steps"]
        per_epoch = [statistics.mean(r["loss"][e] for r in mine if len(r["loss"]) > e) for e in range(epochs)]
        spread = [max(r["loss"][e] for r in mine) - min(r["loss"][e] for r in mine) for e in range(epochs)]
        by_seed = {r["seed"]: r["loss"][-1] for r in base}
        deltas = [r["loss"][-1] - by_seed[r["seed"]] for r in mine if r["seed"] in by_seed]
        lines.append(f"| {c} | {steps} | {2 * rows_per_worker / steps:.0f} | " + " | ".join(
            f"{v:.3f} (±{s / 2:.3f})" for v, s in zip(per_epoch, spread)) + " | "
            + (", ".join(f"{d:+.3f}" for d in deltas) if deltas else "-") + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=4096, help="rows in the dataset (the workers share them equally)")
    ap.add_argument("--epochs", type=int, default=4, help="the example's 4")
    ap.add_argument("--batch", type=int, default=32, help="the example's to_tf batch_size")
    ap.add_argument("--lr", type=float, default=1e-3, help="the example's SGD learning rate")
    ap.add_argument("--seeds", type=int, default=3, help="rounds, each with its own initial weights")
    ap.add_argument("--only", default=",".join(CONTENDERS), help=f"comma-separated, of {','.join(CONTENDERS)}")
    ap.add_argument("--smoke", action="store_true", help="one short round of each: checks the benchmark runs")
    a = ap.parse_args(argv)
    if a.smoke:
        a.rows, a.epochs, a.seeds = 512, 2, 1
    chosen = [c.strip() for c in a.only.split(",") if c.strip()]
    unknown = set(chosen) - set(CONTENDERS)
    if unknown:
        ap.error(f"--only: unknown contender(s) {sorted(unknown)}; choose from {','.join(CONTENDERS)}")
    os.environ.update(TF_ENV)
    os.environ.setdefault("RAY_AUTH_MODE", "token")
    os.chdir(ROOT)  # the workers import benchmarks.ray_train_loss from the driver's working directory
    import ray

    from benchmarks import ray_train_loss as me  # not __main__: Ray Train's workers import the loop by its module

    # Ray Data reads beside the two trainers: a CPU more than the workers reserve, as the example's --smoke-test.
    ray.init(address="local", num_cpus=4, include_dashboard=False, log_to_driver=False, configure_logging=False)
    scratch = Path(tempfile.mkdtemp(prefix="raytf-raytrain-loss-"))
    rows: list[dict] = []
    try:
        for n in range(a.seeds):
            for c in (chosen if n % 2 == 0 else chosen[::-1]):
                row = me.one(c, a, n, scratch)
                rows.append(row)
                print(f"seed {n}: {c}: " + (row.get("error") or f"steps/epoch {row['steps']}, loss "
                      + " ".join(f"{v:.3f}" for v in row["loss"]) + f" ({row['wall_s']:.0f}s)"), flush=True)
    finally:
        ray.shutdown()
        shutil.rmtree(scratch, ignore_errors=True)
    import tensorflow as tf

    print(f"\n{a.rows} rows ({a.rows // 2} per worker), 2 MWMS workers, to_tf/ctx.dataset batch as named, SGD lr "
          f"{a.lr:g}, {a.epochs} epochs, {a.seeds} seed(s) (mean, ± half the range over seeds); Python "
          f"{platform.python_version()}, TF {tf.__version__}, Ray {ray.__version__}\n")
    print(table(rows, a.rows // 2))
    return 1 if any("error" in r for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
