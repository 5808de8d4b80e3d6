"""Ray Data input against plain tf.data for an input-bound job, side by side on one running Ray (issue 23).

Run:  python -m benchmarks.data [--rounds 3] [--preprocess-ms 20] [--rows 16384] [--epochs 3]
      python -m benchmarks.data --smoke      (one short round of each: the CI check that it runs)

The job: synthetic 32x32x3 uint8 'images' made from each row's id (deterministic, no downloads), then a numpy
preprocessing per batch (crop, flip, scale, `passes` 3x3 blurs, per-image standardisation), calibrated here to cost
about --preprocess-ms per per-replica batch on one core: more than the small CNN's training step (~13 ms with
the input cheap, most of it the all-reduce). 2 MWMS workers (cluster.worker.cpus=0.5, cluster.standby=0); the
same rows, model, epochs and batch size in both contenders:

- `tfdata`: tf.data inside each worker: `Dataset.range(rows)` sharded by hand per worker
  (distribute_datasets_from_function), batched, the preprocessing in `Dataset.map(tf.numpy_function(...),
  num_parallel_calls=AUTOTUNE)`, prefetched; no `datasets=`.
- `raydata`: `ray.data.range(rows).map_batches(<the same function>, num_cpus=0.5,
  compute=TaskPoolStrategy(size=2))` in Ray Data's own processes, passed as `raytf.fit(datasets={"train": ...})`;
  the workers read `ctx.dataset("train", "image", "label")`.

Rounds alternate the order (A B, B A, ...). Per contender, the median over rounds of: the wall time of
`raytf.fit`; its first step (result.json's first_step_s); a later epoch end to end (rank 0's epoch rows: its
steps, their stalls, Ray Data's new pass) and the rows/s it gives; the steady step (median step_time_s of the step
rows after the first epoch, every rank: a median, so it leaves out the stalls the epoch time has) and the median
share of it spent waiting for input (input_wait_s); and the time from the last epoch's end to `fit` returning
(teardown: TF's iterators, the tasks' end). Ratios raydata / tfdata are taken within each round, then their median.
"""

from __future__ import annotations

import argparse
import itertools
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from benchmarks.rounds import interleaved

ROOT = Path(__file__).resolve().parents[1]
SIZE, CROP, CHANNELS, CLASSES = 32, 28, 3, 10
# name -> (training function, its extra params)
# tfdata_pool (not run unless asked, --only): tfdata with tf.data's own 2 threads (private_threadpool_size) instead
# of the task's inter-op pool, which raytf caps at the task's CPUs (1 thread here); no faster here in a trial run.
CONTENDERS = {"tfdata": ("train_tfdata", []), "raydata": ("train_raydata", []),
              "tfdata_pool": ("train_tfdata", ["train.params.private_threads=2"])}
DEFAULT = ("tfdata", "raydata")

# The 'raw images': a pattern per class plus one of 97 noise images, both fixed, picked by the row's id.
_rng = np.random.default_rng(0)
_PATTERNS = _rng.integers(0, 160, (CLASSES, SIZE, SIZE, CHANNELS), dtype=np.int16)
_NOISE = _rng.integers(0, 96, (97, SIZE, SIZE, CHANNELS), dtype=np.int16)
del _rng


def decode(ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Rows' ids -> (uint8 images [B, 32, 32, 3], int64 labels): what reading and decoding files would give."""
    ids = np.asarray(ids, dtype=np.int64)
    labels = ids % CLASSES
    return (_PATTERNS[labels] + _NOISE[ids % 97]).astype(np.uint8), labels


def preprocess(ids: np.ndarray, passes: int) -> tuple[np.ndarray, np.ndarray]:
    """Decode, then per image: a 28x28 crop at an offset and a horizontal flip chosen by its id, scale to 0-1,
    `passes` 3x3 box blurs, standardise. Deterministic; the cost grows with `passes` (about linearly)."""
    raw, labels = decode(ids)
    ids = np.asarray(ids, dtype=np.int64)
    out = np.empty((len(ids), CROP, CROP, CHANNELS), np.float32)
    for i, (img, row_id) in enumerate(zip(raw, ids)):
        dy, dx = int(row_id % 5), int(row_id // 5 % 5)
        crop = img[dy:dy + CROP, dx:dx + CROP]
        out[i] = crop[:, ::-1] if row_id % 2 else crop
    out *= 1 / 255
    for _ in range(passes):
        p = np.pad(out, ((0, 0), (1, 1), (1, 1), (0, 0)), mode="edge")
        rows = p[:, :-2] + p[:, 1:-1] + p[:, 2:]
        out = (rows[:, :, :-2] + rows[:, :, 1:-1] + rows[:, :, 2:]) * (1 / 9)
    mean = out.mean(axis=(1, 2, 3), keepdims=True)
    std = out.std(axis=(1, 2, 3), keepdims=True) + 1e-3
    return ((out - mean) / std).astype(np.float32), labels


def ray_batch(batch: dict[str, np.ndarray], passes: int) -> dict[str, np.ndarray]:
    """The same preprocessing as a Ray Data map_batches function (rows of `id`)."""
    images, labels = preprocess(batch["id"], passes)
    return {"image": images, "label": labels}


def calibrate(target_ms: float, batch: int) -> tuple[int, float]:
    """The number of blur passes whose preprocessing of one per-replica batch takes about target_ms on one core of
    this machine (measured alone, here, before Ray starts), and what it took."""
    ids = np.arange(batch, dtype=np.int64)

    def cost(passes: int) -> float:
        preprocess(ids, passes)
        samples = []
        for _ in range(15):
            t = time.perf_counter()
            preprocess(ids, passes)
            samples.append(time.perf_counter() - t)
        return 1000 * statistics.median(samples)

    base, many = cost(0), cost(40)
    per_pass = max((many - base) / 40, 1e-3)
    passes = max(0, round((target_ms - base) / per_pass))
    return passes, cost(passes)


def build_model(tf):
    model = tf.keras.Sequential([
        tf.keras.layers.InputLayer(input_shape=(CROP, CROP, CHANNELS)),
        tf.keras.layers.Conv2D(8, 3, strides=2, activation="relu"),
        tf.keras.layers.GlobalAveragePooling2D(),
        tf.keras.layers.Dense(CLASSES),
    ])
    model.compile(optimizer=tf.keras.optimizers.SGD(0.05),
                  loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
    return model


def train_tfdata(ctx) -> None:
    """raytf training function: each worker reads its own share with tf.data and preprocesses it in Dataset.map."""
    import tensorflow as tf

    rows, passes = int(ctx.params["rows"]), int(ctx.params["passes"])
    private = int(ctx.params.get("private_threads", 0))
    strategy = ctx.strategy

    def dataset_fn(input_context):
        per_replica = input_context.get_per_replica_batch_size(ctx.global_batch_size)

        def prep(ids):
            x, y = tf.numpy_function(lambda i: preprocess(i, passes), [ids], [tf.float32, tf.int64], stateful=False)
            x.set_shape([per_replica, CROP, CROP, CHANNELS])
            y.set_shape([per_replica])
            return x, y

        ds = tf.data.Dataset.range(rows).shard(input_context.num_input_pipelines, input_context.input_pipeline_id)
        ds = ds.batch(per_replica, drop_remainder=True).repeat()  # Keras keeps one iterator across the epochs here
        ds = ds.map(prep, num_parallel_calls=tf.data.AUTOTUNE).prefetch(tf.data.AUTOTUNE)
        if private:
            options = tf.data.Options()
            options.threading.private_threadpool_size = private
            ds = ds.with_options(options)
        return ds

    with strategy.scope():
        model = build_model(tf)
    # Keras needs the steps of a distribute_datasets_from_function dataset: each worker's share in whole batches, the
    # same as ctx.dataset's epoch on the raydata side (the dataset repeats: epoch 2 reads the rows again).
    steps = rows // ctx.global_batch_size
    model.fit(strategy.distribute_datasets_from_function(dataset_fn), epochs=ctx.epochs, steps_per_epoch=steps,
              initial_epoch=ctx.initial_epoch, verbose=0, callbacks=ctx.keras_callbacks())


def train_raydata(ctx) -> None:
    """raytf training function: each worker reads its equal share of the run's Ray Data dataset `train`."""
    import tensorflow as tf

    with ctx.strategy.scope():
        model = build_model(tf)
    model.fit(ctx.dataset("train", "image", "label"), epochs=ctx.epochs, initial_epoch=ctx.initial_epoch, verbose=0,
              callbacks=ctx.keras_callbacks())


def ray_dataset(rows: int, passes: int, batch: int, tasks: int, task_cpus: float, blocks: int):
    import ray

    return ray.data.range(rows, override_num_blocks=blocks).map_batches(
        ray_batch, fn_kwargs={"passes": passes}, batch_size=batch, batch_format="numpy", num_cpus=task_cpus,
        compute=ray.data.TaskPoolStrategy(size=tasks))


def one(contender: str, a, scratch: Path, n: int, passes: int) -> dict:
    import raytf

    cfg = raytf.load_config(ROOT / "conf/local.yaml", [
        f"storage.path={scratch / 'runs'}", f"run.name=data-{contender}-{n}", f"train.epochs={a.epochs}",
        "train.steps_per_epoch=null", f"train.batch_size={a.batch}", "cluster.num_workers=2",
        f"cluster.worker.cpus={a.worker_cpus}", "cluster.standby=0", "checkpoint.every_epochs=0",
        "checkpoint.export_model=false", "checkpoint.resume=false", f"metrics.every_steps={a.every}",
        f"train.entrypoint=benchmarks.data:{CONTENDERS[contender][0]}", f"train.params.rows={a.rows}",
        f"train.params.passes={passes}", *CONTENDERS[contender][1]])
    row: dict = {"contender": contender, "round": n}
    t0 = time.monotonic()
    try:
        datasets = None
        if contender == "raydata":
            datasets = {"train": ray_dataset(a.rows, passes, a.batch, a.tasks, a.task_cpus, a.blocks)}
        result = raytf.fit(cfg, quiet=True, datasets=datasets, raise_on_failure=False)
    except raytf.RaytfError as e:  # a benchmark row, not a crash of the whole table
        row.update(wall_s=time.monotonic() - t0, error=f"{type(e).__name__}: {e}"[:300])
        return row
    row["wall_s"] = time.monotonic() - t0
    ended = time.time()
    if result.status != "succeeded":
        row["error"] = str(result.error)[:300]
        return row
    row["first_step_s"] = result.summary.get("first_step_s")
    df = result.metrics
    steps = df[(df["kind"] == "step") & df["step_time_s"].notna()]
    steady = steps[steps["epoch"] > steps["epoch"].min()] if steps["epoch"].nunique() > 1 else steps
    step_s = float(steady["step_time_s"].median())
    row["step_ms"] = 1000 * step_s
    if "input_wait_s" in steady and steady["input_wait_s"].notna().any():
        row["wait_share"] = float((steady["input_wait_s"] / steady["step_time_s"]).median())
    ends = sorted(df[(df["kind"] == "epoch") & (df["rank"] == 0)]["time"])
    if ends:
        row["tail_s"] = ended - ends[-1]  # the last epoch's end -> fit returned: teardown
    if len(ends) > 1:  # a later epoch end to end: its steps, their stalls, and for raydata a new pass of the pipeline
        row["epoch_s"] = statistics.mean(b - a for a, b in itertools.pairwise(ends))
        row["rows_per_s"] = a.rows / row["epoch_s"]
    row["steps"] = int(df["step"].max()) // a.epochs  # per epoch, per worker (a.every may not divide it)
    return row


def _median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def _fmt(v, spec: str = ".2f") -> str:
    return "—" if v is None else format(v, spec)


KEYS = (("wall_s", "wall s", ".1f"), ("first_step_s", "first step s", ".1f"), ("epoch_s", "later epoch s", ".1f"),
        ("rows_per_s", "rows/s (later epochs)", ".0f"), ("step_ms", "steady step ms (median)", ".1f"),
        ("wait_share", "input wait share", ".2f"), ("tail_s", "last epoch -> fit returned s", ".1f"))


def table(rows: list[dict]) -> str:
    ok = [r for r in rows if "error" not in r]
    names = [c for c in CONTENDERS if any(r["contender"] == c for r in rows)]
    lines = ["| contender | " + " | ".join(h for _, h, _ in KEYS) + " | steps/epoch/worker | runs ok |",
             "|---|" + "---|" * (len(KEYS) + 2)]
    med = {}
    for c in names:
        mine = [r for r in ok if r["contender"] == c]
        med[c] = {k: _median([r.get(k) for r in mine]) for k, _, _ in KEYS}
        steps = ",".join(map(str, sorted({r["steps"] for r in mine}))) or "—"
        runs = f"{len(mine)}/{sum(r['contender'] == c for r in rows)}"
        lines.append(f"| {c} | " + " | ".join(_fmt(med[c][k], spec) for k, _, spec in KEYS) + f" | {steps} | {runs} |")
    by_round = {(r["contender"], r["round"]): r for r in ok}
    for base in (c for c in names if c != "raydata"):
        if "raydata" not in names:
            break
        ratios = []
        for k, _, _ in KEYS:
            paired = [by_round[("raydata", n)][k] / by_round[(base, n)][k] for c, n in by_round
                      if c == "raydata" and (base, n) in by_round and by_round[("raydata", n)].get(k)
                      and by_round[(base, n)].get(k)]
            ratios.append(_fmt(_median(paired), ".2f"))
        lines.append(f"| raydata ÷ {base} (paired by round) | " + " | ".join(ratios) + " | | |")
    lines.append("")
    for c in names:  # the spread behind the medians
        mine = [r for r in ok if r["contender"] == c]
        lines.append(f"{c} by round: later epoch s " + ", ".join(_fmt(r.get("epoch_s"), ".1f") for r in mine)
                     + "; last epoch -> fit returned s " + ", ".join(_fmt(r.get("tail_s"), ".1f") for r in mine))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.data", description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--rows", type=int, default=16384)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--batch", type=int, default=32, help="per replica (global = 2 x batch)")
    ap.add_argument("--preprocess-ms", type=float, default=20.0,
                    help="per per-replica batch on one core (the training step alone: ~13 ms here)")
    ap.add_argument("--worker-cpus", type=float, default=0.5, help="cluster.worker.cpus, both contenders")
    ap.add_argument("--ray-cpus", type=float, default=2, help="Ray's logical CPUs (this machine's cores: honest)")
    ap.add_argument("--tasks", type=int, default=2, help="raydata: map_batches tasks at once (TaskPoolStrategy)")
    ap.add_argument("--task-cpus", type=float, default=0.5, help="raydata: CPUs per map_batches task")
    ap.add_argument("--blocks", type=int, default=32, help="raydata: blocks of ray.data.range")
    ap.add_argument("--every", type=int, default=10, help="metrics.every_steps")
    ap.add_argument("--only", default=",".join(DEFAULT), help=f"comma-separated, of {','.join(CONTENDERS)}")
    ap.add_argument("--smoke", action="store_true", help="one short round of each: checks the benchmark runs")
    a = ap.parse_args(argv)
    if a.smoke:
        a.rounds, a.rows, a.epochs, a.blocks, a.every = 1, 1024, 2, 4, 4
    chosen = [c.strip() for c in a.only.split(",") if c.strip()]
    unknown = set(chosen) - set(CONTENDERS)
    if unknown:
        ap.error(f"--only: unknown contender(s) {sorted(unknown)}; choose from {','.join(CONTENDERS)}")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    os.chdir(ROOT)  # raytf's tasks import benchmarks.data from the driver's working directory
    load_before = os.getloadavg()[0]
    passes, cost_ms = calibrate(a.preprocess_ms, a.batch)
    import ray

    from benchmarks import data as me  # not __main__: Ray Data's tasks import the function by its module

    ray.init(address="local", num_cpus=a.ray_cpus, include_dashboard=False, log_to_driver=False,
             configure_logging=False)
    scratch = Path(tempfile.mkdtemp(prefix="raytf-data-"))
    try:
        rows = interleaved(a.rounds, chosen, lambda c, n: me.one(c, a, scratch, n, passes))
    finally:
        ray.shutdown()
        shutil.rmtree(scratch, ignore_errors=True)
    import tensorflow as tf

    ray_cpus = a.ray_cpus
    left = ray_cpus - 2 * a.worker_cpus
    print(f"\n{a.rows} rows, 2 MWMS workers, per-replica batch {a.batch} (global {2 * a.batch}), {a.epochs} epochs; "
          f"preprocessing {passes} blur passes = {cost_ms:.1f} ms per {a.batch}-row batch on one core (alone); "
          f"{a.rounds} rounds, order alternating; {os.cpu_count()} cores, Ray num_cpus={ray_cpus:g} "
          f"(workers {2 * a.worker_cpus:g}, left for Ray Data {left:g}: raydata runs {a.tasks} map_batches tasks "
          f"of {a.task_cpus:g} CPU); Python {platform.python_version()}, TF {tf.__version__}, Ray {ray.__version__}; "
          f"load average (1 min) {load_before:.1f} before, {os.getloadavg()[0]:.1f} after\n")
    print(table(rows))
    if ray_cpus > (os.cpu_count() or 1):
        print(f"\nRay was given {ray_cpus:g} logical CPUs on {os.cpu_count()} cores: Ray Data's tasks and the "
              "trainers then share the same cores, oversubscribed.")
    return 1 if any("error" in r for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
