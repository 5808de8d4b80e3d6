"""What the step-time breakdown (raytf/_task/timing.py, metrics.breakdown) costs a step, measured inside the same
two MWMS processes so the machine's drift cancels.

Run:  python -m benchmarks.breakdown [--blocks 30] [--block-steps 20] [--batch 64]

Two hand-launched workers (TF_CONFIG on 127.0.0.1, one TF and one OpenMP thread each) train benchmarks/workload.py's
CNN with a custom MultiWorkerMirroredStrategy step: `next(iterator)` and the gradient all-reduce inside one
tf.function, as Keras fit's train_function has them. The same step is traced twice: once before raytf's
instrumentation is installed (plain) and once after (timed: timestamps around the get_next and the all-reduce,
and the totals read every 10 steps, as a metrics row reads them). Blocks of steps alternate, plain and timed
(ABAB...), on the same iterator, the same model and the same processes; the table gives the median step of each
and the median of the paired block ratios.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ENV = {"TF_USE_LEGACY_KERAS": "1", "TF_CPP_MIN_LOG_LEVEL": "2", "OMP_NUM_THREADS": "1"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def worker(out: str, blocks: int, block_steps: int, batch: int) -> None:
    import tensorflow as tf

    from benchmarks import workload
    from raytf._core.breakdown import Split
    from raytf._task import timing

    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    rank = strategy.cluster_resolver.task_id
    with strategy.scope():
        model = workload.build_model(tf)
        optimizer = tf.keras.optimizers.SGD(0.01)
    loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")
    global_batch = batch * strategy.num_replicas_in_sync
    iterator = iter(strategy.experimental_distribute_dataset(workload.dataset(tf, global_batch)))

    def replica_step(x, y):
        with tf.GradientTape() as tape:
            loss = tf.nn.compute_average_loss(loss_fn(y, model(x, training=True)), global_batch_size=global_batch)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))  # all-reduces the gradients
        return loss

    def make():
        @tf.function
        def step(it):
            x, y = next(it)
            return strategy.reduce("sum", strategy.run(replica_step, args=(x, y)), axis=None)

        return step

    plain = make()
    plain(iterator)  # traced before the instrumentation: stays plain
    timing.install()
    timed = make()
    timed(iterator)  # traced after: timestamps around its get_next and its all-reduce
    split = Split(timing.totals)
    every = 10  # a metrics row (metrics.every_steps) reads the totals
    for _ in range(block_steps):  # warm-up, both
        plain(iterator)
        timed(iterator)
    result = {"plain": [], "timed": [], "parts": {}}
    for _ in range(blocks):
        for name, fn in (("plain", plain), ("timed", timed)):
            t = time.perf_counter()
            for i in range(block_steps):
                loss = fn(iterator)
                if name == "timed" and i % every == every - 1:
                    split.row(1.0, every)
            float(loss)  # the block ends when its last step has
            result[name].append((time.perf_counter() - t) / block_steps)
    split.mark()
    t = time.perf_counter()
    for _ in range(block_steps):
        loss = timed(iterator)
    float(loss)
    result["parts"] = split.row(time.perf_counter() - t, block_steps)
    Path(out, f"breakdown-{rank}.json").write_text(json.dumps(result))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.breakdown", description=__doc__.splitlines()[0])
    ap.add_argument("--blocks", type=int, default=30, help="blocks of each, alternating")
    ap.add_argument("--block-steps", type=int, default=20)
    ap.add_argument("--batch", type=int, default=64, help="per replica")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.worker:
        worker(a.worker, a.blocks, a.block_steps, a.batch)
        return 0
    import tempfile

    out = tempfile.mkdtemp(prefix="raytf-breakdown-")
    hosts = [f"127.0.0.1:{_free_port()}" for _ in range(2)]
    procs = []
    for i in range(2):
        env = {**os.environ, **ENV, "TF_CONFIG": json.dumps({"cluster": {"worker": hosts},
                                                            "task": {"type": "worker", "index": i}})}
        procs.append(subprocess.Popen([sys.executable, "-m", "benchmarks.breakdown", "--worker", out, "--blocks",
                                       str(a.blocks), "--block-steps", str(a.block_steps), "--batch", str(a.batch)],
                                      cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE))
    codes = [p.wait(timeout=1800) for p in procs]
    if any(codes):
        for p in procs:
            sys.stderr.write(p.stderr.read().decode(errors="replace")[-2000:])
        return 1
    r0 = json.loads(Path(out, "breakdown-0.json").read_text())
    plain, timed = r0["plain"], r0["timed"]
    ratios = [t / p for p, t in zip(plain, timed)]
    print(f"2 MWMS workers on 127.0.0.1, per-replica batch {a.batch}; {a.blocks} alternating blocks of "
          f"{a.block_steps} steps each way (rank 0's clock)\n")
    print("| step | median ms | ratio to plain (median of paired blocks) |\n|---|---|---|")
    print(f"| plain (as traced without raytf's instrumentation) | {1000 * statistics.median(plain):.2f} | 1.000 |")
    print(f"| timed (get_next and all-reduce timed, totals read every 10 steps) | {1000 * statistics.median(timed):.2f}"
          f" | {statistics.median(ratios):.4f} |")
    q = statistics.quantiles(ratios, n=4)
    print(f"\npaired ratios: quartiles {q[0]:.4f} / {q[1]:.4f} / {q[2]:.4f}; the parts of a timed step (rank 0): "
          + ", ".join(f"{k} {1000 * v:.2f} ms" for k, v in sorted(r0["parts"].items())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
