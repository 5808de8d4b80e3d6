"""Reproduce `Model.fit`'s stall after its last epoch (raytf issue 33; the cause: raytf/_task/tfdata.py), no Ray.

Run:  python -m benchmarks.fit_stall [--reps 8]            TF as it is: some fits stall 0.3-9 s at their return
      python -m benchmarks.fit_stall --defer                with raytf's fix (tfdata.install): none does
      python -m benchmarks.fit_stall --vlog                 also print TF's autotuning log lines during each stall

Two MultiWorkerMirroredStrategy processes on 127.0.0.1 (TF_CONFIG by hand), examples/keras_cnn.py's model and
dataset (`prefetch(AUTOTUNE)`), `--reps` fits of `--epochs` epochs each in one process. Per rank and fit it prints the
time from the fit's `on_train_end` to `fit` returning, which is all teardown: the training iterator's destructor
waiting for tf.data's autotuning thread, which missed its cancellation (with `--vlog`: its last line is
"model.cc] Waiting for N ms", at the on_train_end, and the return comes N ms later).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def worker(rank: int, ports: list[int], reps: int, epochs: int, defer: bool) -> None:
    os.environ["TF_USE_LEGACY_KERAS"] = "1"
    os.environ["TF_CONFIG"] = json.dumps({"cluster": {"worker": [f"127.0.0.1:{p}" for p in ports]},
                                          "task": {"type": "worker", "index": rank}})
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    if defer:
        from raytf._task import tfdata

        assert tfdata.install()
    sys.path.insert(0, str(ROOT))
    from examples.data import digits
    from examples.keras_cnn import build_model, make_dataset

    (x, y), (xv, yv) = digits(seed=0)
    ended = {}

    class TrainEnd(tf.keras.callbacks.Callback):
        def on_train_end(self, logs=None):
            ended["t"] = time.monotonic()
            print(f"TRAIN_END {time.time():.6f}", file=sys.stderr, flush=True)  # (beside TF's log, with --vlog)

    with strategy.scope():
        model = build_model(0.01)
    for rep in range(reps):
        began = time.monotonic()
        model.fit(make_dataset(x, y, 32, shuffle=True, seed=0), epochs=epochs, steps_per_epoch=8,
                  validation_data=make_dataset(xv, yv, 32, shuffle=False, seed=0), validation_steps=4,
                  callbacks=[TrainEnd()], verbose=0)
        returned = time.monotonic()
        print(json.dumps({"rank": rank, "fit": rep + 1, "fit_s": round(returned - began, 2),
                          "stall_s": round(returned - ended["t"], 2)}), flush=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.fit_stall", description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=8)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--defer", action="store_true", help="with raytf's fix: iterators torn down off the thread")
    ap.add_argument("--vlog", action="store_true", help="TF_CPP_VMODULE=model=2: the autotuning thread's waits")
    ap.add_argument("--worker", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--ports", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.worker is not None:
        worker(a.worker, [int(p) for p in a.ports.split(",")], a.reps, a.epochs, a.defer)
        return 0
    ports = []
    for _ in range(2):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            ports.append(s.getsockname()[1])
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "0" if a.vlog else "2"}
    if a.vlog:
        env["TF_CPP_VMODULE"] = "model=2"
    args = [sys.executable, "-m", "benchmarks.fit_stall", "--reps", str(a.reps), "--epochs", str(a.epochs),
            "--ports", ",".join(map(str, ports)), *(["--defer"] if a.defer else [])]
    # Each worker's output to a file: a pipe read after the other worker's would fill, and block its writer in
    # the middle of a collective (both would wait for ever).
    with tempfile.TemporaryDirectory(prefix="fit-stall-") as logs, contextlib.ExitStack() as stack:
        files = [(stack.enter_context(open(f"{logs}/out{r}", "w+")), stack.enter_context(open(f"{logs}/err{r}", "w+")))
                 for r in (0, 1)]
        procs = [subprocess.Popen([*args, "--worker", str(rank)], cwd=ROOT, env=env, stdout=out, stderr=err,
                                  text=True) for rank, (out, err) in enumerate(files)]
        for p in procs:
            p.wait(timeout=1800)
        outs = []
        for out, err in files:
            out.seek(0)
            err.seek(0)
            outs.append((out.read(), err.read()))
    rows = [json.loads(line) for out, _ in outs for line in out.splitlines() if line.startswith("{")]
    for r in sorted(rows, key=lambda r: (r["fit"], r["rank"])):
        print(f"fit {r['fit']} rank {r['rank']}: fit {r['fit_s']:.2f} s, on_train_end -> return {r['stall_s']:.2f} s")
    stalled = [r for r in rows if r["stall_s"] >= 0.2]
    print(f"{'with' if a.defer else 'without'} raytf's fix: {len(stalled)} of {len(rows)} fits stalled >= 0.2 s"
          + (f" (max {max(r['stall_s'] for r in stalled):.2f} s)" if stalled else ""))
    if a.vlog:
        for rank, (_, err) in enumerate(outs):
            lines = err.splitlines()
            for i, line in enumerate(lines):
                if line.startswith("TRAIN_END"):
                    waits = [x for x in lines[max(0, i - 3):i + 3] if "Waiting for" in x]
                    print(f"rank {rank} {line}: {waits[-1] if waits else 'no wait logged'}")
    return 0 if all(p.returncode == 0 for p in procs) else 1


if __name__ == "__main__":
    sys.exit(main())
