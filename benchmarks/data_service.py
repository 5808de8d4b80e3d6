"""The tf.data service on Ray against the same pipeline in each trainer, side by side on one running Ray (issue 37).

Run:  python -m benchmarks.data_service [--rounds 3] [--service-workers 2] [--preprocess-ms 20] [--rows 8192]
      python -m benchmarks.data_service --smoke      (one short round of each: the CI check that it runs)

The job: an input-bound one. Each row is a synthetic 32x32x3 'image' made from its id in TensorFlow ops
(`tf.random.stateless_uniform`, deterministic, no downloads), then preprocessed per batch, also in TensorFlow ops
(the service runs the pipeline's graph: no Python in it): a 28x28 crop, a flip, scaling, `passes` 3x3 box blurs
(`tf.nn.avg_pool2d`) and a per-image standardisation, calibrated here (in a process of its own, one thread, before
Ray starts) to cost about --preprocess-ms per per-replica batch: more than the small CNN's step. 2 MWMS workers
(cluster.worker.cpus, both contenders) train it with Keras `fit`; one training function, one pipeline, two runs:

- `local`: data_service.workers=0: each trainer preprocesses its own half of the rows in its tf.data pipeline (the
  tuned input of benchmarks/data.py's tfdata: shard first, per-replica batches, distribute_datasets_from_function).
- `service`: data_service.workers=N (--service-workers, each data_service.cpus=--service-cpus): the same
  preprocessing, in one repeated pipeline read through `ctx.data_service(ds)`, runs in the service's workers
  (distributed_epoch: the rows shared by the trainers as they ask; repeat() + steps_per_epoch, so every step is
  full on every worker).

Both train rows / (2 x --batch) steps an epoch, 2 x --batch rows a step.

Rounds alternate the order. Per contender, the median over rounds of: the trainers' own CPU seconds per step (each
trainer's process CPU time, all its threads, over the epochs after the first, divided by its steps: the
preprocessing leaves the trainers with the service), the input wait per step (the step rows' input_wait_s, after the
first epoch: the step-time breakdown), the step time, rows per second (a later epoch, rank 0's epoch ends), and the
wall time and first step of the whole `raytf.fit`. Ratios service / local are taken within each round, then their
median. On a machine with few cores both contenders share the same cores (see benchmarks/RESULTS.md).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.rounds import interleaved

ROOT = Path(__file__).resolve().parents[1]
SIZE, CROP, CHANNELS, CLASSES = 32, 28, 3, 10
CONTENDERS = ["local", "service"]


def preprocess(tf, ids, passes: int):
    """A batch of ids -> (float32 images [B, 28, 28, 3], int64 labels), in TensorFlow ops only: decode (an image per
    id, made from it), crop at an offset and flip chosen by the id, scale, `passes` 3x3 box blurs, standardise."""
    labels = ids % CLASSES
    seeds = tf.stack([ids, tf.zeros_like(ids)], axis=1)
    raw = tf.map_fn(lambda s: tf.random.stateless_uniform([SIZE, SIZE, CHANNELS], seed=s, maxval=255.0), seeds,
                    fn_output_signature=tf.float32)
    dy, dx = ids[0] % 5, ids[0] // 5 % 5  # (one offset per batch: the flip differs per image)
    crop = raw[:, dy:dy + CROP, dx:dx + CROP, :]
    flip = tf.reshape(ids % 2 == 1, [-1, 1, 1, 1])
    out = tf.where(flip, tf.reverse(crop, axis=[2]), crop) / 255.0
    for _ in range(passes):
        out = tf.nn.avg_pool2d(out, 3, 1, "SAME")
    mean, var = tf.nn.moments(out, axes=[1, 2, 3], keepdims=True)
    # Static image shapes (the crop's offsets are tensors): see raytf's docs/data.md on uneven shares.
    return tf.ensure_shape((out - mean) / tf.sqrt(var + 1e-6), [None, CROP, CROP, CHANNELS]), labels


def pipeline(tf, ctx, rows: int, passes: int):
    """`service`: the user's pipeline, the same on every worker (they share the service's job): ids batched by the
    global batch (tf.distribute splits each element among the replicas), preprocessed, repeated, read through the
    service. Repeated, with steps_per_epoch: every step of every worker has a full batch (TF's recommended form for
    a shared job; docs/data.md, the tf.data service), and an epoch is rows / global batch steps."""
    ds = tf.data.Dataset.range(rows).batch(ctx.global_batch_size, drop_remainder=True)
    ds = ds.map(lambda ids: preprocess(tf, ids, passes), num_parallel_calls=tf.data.AUTOTUNE).repeat()
    return ctx.data_service(ds).prefetch(tf.data.AUTOTUNE)


def local_pipeline(tf, ctx, rows: int, passes: int):
    """`local`: the tuned tf.data input of each trainer (as benchmarks/data.py's tfdata): its own half of the ids,
    batched per replica, preprocessed, for distribute_datasets_from_function (no rebatching, no auto-sharding)."""

    def dataset_fn(input_context):
        ds = tf.data.Dataset.range(rows).shard(input_context.num_input_pipelines, input_context.input_pipeline_id)
        ds = ds.batch(input_context.get_per_replica_batch_size(ctx.global_batch_size), drop_remainder=True)
        ds = ds.repeat()  # Keras keeps one iterator across the epochs here (steps_per_epoch given)
        return ds.map(lambda ids: preprocess(tf, ids, passes), num_parallel_calls=tf.data.AUTOTUNE).prefetch(
            tf.data.AUTOTUNE)

    return ctx.strategy.distribute_datasets_from_function(dataset_fn)


def train(ctx) -> None:
    """raytf training function (both contenders): Keras fit of benchmarks.data's small CNN on the pipeline, every
    row once an epoch, the same per-replica batch; each rank's process CPU time per epoch to
    train.params.out_dir/<run>-r<rank>.json."""
    import tensorflow as tf

    from benchmarks.data import build_model

    class CpuPerEpoch(tf.keras.callbacks.Callback):
        def __init__(self) -> None:
            super().__init__()
            self.epochs: list[dict] = []

        def on_epoch_begin(self, epoch, logs=None):
            self.cpu, self.steps = time.process_time(), 0

        def on_train_batch_end(self, batch, logs=None):
            self.steps += 1

        def on_epoch_end(self, epoch, logs=None):
            self.epochs.append({"epoch": epoch, "cpu_s": time.process_time() - self.cpu, "steps": self.steps})

    cpu = CpuPerEpoch()
    rows, passes = int(ctx.params["rows"]), int(ctx.params["passes"])
    with ctx.strategy.scope():
        model = build_model(tf)
    steps = rows // ctx.global_batch_size  # (both repeat: Keras keeps one iterator across the epochs)
    data = pipeline(tf, ctx, rows, passes) if ctx.cfg.data_service.workers else local_pipeline(tf, ctx, rows, passes)
    model.fit(data, epochs=ctx.epochs, steps_per_epoch=steps, initial_epoch=ctx.initial_epoch, verbose=0,
              callbacks=[*ctx.keras_callbacks(), cpu])
    out = Path(ctx.params["out_dir"]) / f"{ctx.cfg.run.name}-r{ctx.rank}.json"
    out.write_text(json.dumps(cpu.epochs))


_CALIBRATE = """
import json, statistics, sys, time
import tensorflow as tf
tf.config.threading.set_intra_op_parallelism_threads(1)
tf.config.threading.set_inter_op_parallelism_threads(1)
from benchmarks.data_service import preprocess
batch, target = int(sys.argv[1]), float(sys.argv[2])
ids = tf.range(batch, dtype=tf.int64)
def cost(passes):
    f = tf.function(lambda i: preprocess(tf, i, passes))
    f(ids)
    samples = []
    for _ in range(10):
        t = time.perf_counter(); f(ids)[0].numpy(); samples.append(time.perf_counter() - t)
    return 1000 * statistics.median(samples)
base, many = cost(0), cost(40)
per_pass = max((many - base) / 40, 1e-3)
passes = max(0, round((target - base) / per_pass))
print(json.dumps([passes, cost(passes)]))
"""


def calibrate(target_ms: float, batch: int) -> tuple[int, float]:
    """The blur passes whose preprocessing of one per-replica batch takes about target_ms on one thread of this
    machine, and what it took: in a process of its own (TensorFlow stays out of this one), before Ray starts."""
    out = subprocess.run([sys.executable, "-c", _CALIBRATE, str(batch), str(target_ms)], cwd=ROOT, check=True,
                         capture_output=True, text=True, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
    passes, cost = json.loads(out.stdout.strip().splitlines()[-1])
    return int(passes), float(cost)


def one(contender: str, a, scratch: Path, n: int, passes: int) -> dict:
    import raytf

    name = f"dsvc-{contender}-{n}"
    service = [f"data_service.workers={a.service_workers}", f"data_service.cpus={a.service_cpus}"] \
        if contender == "service" else []
    cfg = raytf.load_config(ROOT / "conf/local.yaml", [
        f"storage.path={scratch / 'runs'}", f"run.name={name}", f"train.epochs={a.epochs}",
        "train.steps_per_epoch=null", f"train.batch_size={a.batch}", "cluster.num_workers=2",
        f"cluster.worker.cpus={a.worker_cpus}", "cluster.standby=0", "checkpoint.every_epochs=0",
        "checkpoint.export_model=false", "checkpoint.resume=false", f"metrics.every_steps={a.every}",
        "train.entrypoint=benchmarks.data_service:train", f"train.params.rows={a.rows}",
        f"train.params.passes={passes}", f"train.params.out_dir={scratch}", *service])
    row: dict = {"contender": contender, "round": n}
    t0 = time.monotonic()
    try:
        result = raytf.fit(cfg, quiet=True)
    except raytf.RaytfError as e:  # a benchmark row, not a crash of the whole table
        row.update(wall_s=time.monotonic() - t0, error=f"{type(e).__name__}: {e}"[:300])
        return row
    row["wall_s"] = time.monotonic() - t0
    if result.status != "succeeded":
        row["error"] = str(result.error)[:300]
        tb = next(iter(result.error.failures.values()), None) if result.error is not None else None
        if tb is not None:
            print(f"{name}: {tb.remote_traceback[-3000:]}", file=sys.stderr)
        return row
    row["first_step_s"] = result.summary.get("first_step_s")
    cpu, steps = 0.0, 0
    for rank in (0, 1):
        epochs = json.loads((scratch / f"{name}-r{rank}.json").read_text())
        later = epochs[1:] or epochs
        cpu += sum(e["cpu_s"] for e in later)
        steps += sum(e["steps"] for e in later)
    row["trainer_cpu_ms"] = 1000 * cpu / max(steps, 1)
    row["steps"] = steps // 2 // max(len(later), 1)  # per epoch, per worker
    df = result.metrics
    rows_ = df[(df["kind"] == "step") & df["step_time_s"].notna()]
    steady = rows_[rows_["epoch"] > rows_["epoch"].min()] if rows_["epoch"].nunique() > 1 else rows_
    row["step_ms"] = 1000 * float(steady["step_time_s"].median())
    if "input_wait_s" in steady and steady["input_wait_s"].notna().any():
        row["input_wait_ms"] = 1000 * float(steady["input_wait_s"].median())
    ends = sorted(df[(df["kind"] == "epoch") & (df["rank"] == 0)]["time"])
    if len(ends) > 1:
        row["rows_per_s"] = a.rows / statistics.mean(b - e for e, b in itertools.pairwise(ends))
    return row


def _median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def _fmt(v, spec: str = ".2f") -> str:
    return "—" if v is None else format(v, spec)


KEYS = (("trainer_cpu_ms", "trainers' own CPU ms/step", ".1f"), ("input_wait_ms", "input wait ms/step", ".1f"),
        ("step_ms", "step ms (median)", ".1f"), ("rows_per_s", "rows/s (later epochs)", ".0f"),
        ("wall_s", "wall s", ".1f"), ("first_step_s", "first step s", ".1f"))


def table(rows: list[dict]) -> str:
    ok = [r for r in rows if "error" not in r]
    names = [c for c in CONTENDERS if any(r["contender"] == c for r in rows)]
    lines = ["| contender | " + " | ".join(h for _, h, _ in KEYS) + " | steps/epoch/worker | runs ok |",
             "|---|" + "---|" * (len(KEYS) + 2)]
    for c in names:
        mine = [r for r in ok if r["contender"] == c]
        med = {k: _median([r.get(k) for r in mine]) for k, _, _ in KEYS}
        steps = ",".join(map(str, sorted({r["steps"] for r in mine}))) or "—"
        runs = f"{len(mine)}/{sum(r['contender'] == c for r in rows)}"
        lines.append(f"| {c} | " + " | ".join(_fmt(med[k], spec) for k, _, spec in KEYS) + f" | {steps} | {runs} |")
    by_round = {(r["contender"], r["round"]): r for r in ok}
    if set(names) == set(CONTENDERS):
        ratios = []
        for k, _, _ in KEYS:
            paired = [by_round[("service", n)][k] / by_round[("local", n)][k] for c, n in by_round
                      if c == "service" and ("local", n) in by_round and by_round[("service", n)].get(k)
                      and by_round[("local", n)].get(k)]
            ratios.append(_fmt(_median(paired), ".2f"))
        lines.append("| service ÷ local (paired by round) | " + " | ".join(ratios) + " | | |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.data_service", description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--rows", type=int, default=8192)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--batch", type=int, default=32, help="per replica (global = 2 x batch)")
    ap.add_argument("--preprocess-ms", type=float, default=20.0, help="per per-replica batch on one thread")
    ap.add_argument("--worker-cpus", type=float, default=0.5, help="cluster.worker.cpus, both contenders")
    ap.add_argument("--service-workers", type=int, default=2, help="service: data_service.workers")
    ap.add_argument("--service-cpus", type=float, default=0.5, help="service: data_service.cpus")
    ap.add_argument("--ray-cpus", type=float, default=None,
                    help="Ray's logical CPUs (default: this machine's cores, at least what the service run reserves)")
    ap.add_argument("--every", type=int, default=10, help="metrics.every_steps")
    ap.add_argument("--smoke", action="store_true", help="one short round of each: checks the benchmark runs")
    a = ap.parse_args(argv)
    if a.smoke:
        a.rounds, a.rows, a.epochs, a.every, a.service_workers, a.preprocess_ms = 1, 512, 2, 2, 1, 5.0
    ray_cpus = a.ray_cpus or max(os.cpu_count() or 1, 2 * a.worker_cpus + a.service_workers * a.service_cpus)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    os.chdir(ROOT)  # raytf's tasks import benchmarks.data_service from the driver's working directory
    load_before = os.getloadavg()[0]
    passes, cost_ms = calibrate(a.preprocess_ms, a.batch)
    import ray

    from benchmarks import data_service as me  # not __main__: the tasks import the training function by its module

    ray.init(address="local", num_cpus=ray_cpus, include_dashboard=False, log_to_driver=False,
             configure_logging=False)
    scratch = Path(tempfile.mkdtemp(prefix="raytf-dsvc-"))
    try:
        rows = interleaved(a.rounds, CONTENDERS, lambda c, n: me.one(c, a, scratch, n, passes))
    finally:
        versions = f"Python {platform.python_version()}, Ray {ray.__version__}"
        ray.shutdown()
        shutil.rmtree(scratch, ignore_errors=True)
    print(f"\n{a.rows} rows, 2 MWMS workers of {a.worker_cpus:g} CPU, per-replica batch {a.batch} (global "
          f"{2 * a.batch}), {a.epochs} epochs; preprocessing {passes} blur passes = {cost_ms:.1f} ms per {a.batch}-row "
          f"batch on one thread (alone); service: {a.service_workers} worker(s) of {a.service_cpus:g} CPU; "
          f"{a.rounds} rounds, order alternating; {os.cpu_count()} cores, Ray num_cpus={ray_cpus:g}; {versions}; "
          f"load average (1 min) {load_before:.1f} before, {os.getloadavg()[0]:.1f} after\n")
    print(table(rows))
    reserved = 2 * a.worker_cpus + a.service_workers * a.service_cpus
    if reserved > (os.cpu_count() or 1):
        print(f"\nThe service run reserves {reserved:g} CPUs on "
              f"{os.cpu_count()} cores: its workers and the trainers share the same cores (no speed-up can show; the "
              "trainers' own CPU per step still does).")
    return 1 if any("error" in r for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
