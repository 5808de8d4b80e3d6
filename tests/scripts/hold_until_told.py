"""A custom loop on MultiWorkerMirroredStrategy that holds at its --hold-at step (every rank) until the file --go-file
exists, having made --started-file (rank 0) once it got there: a run that is surely training while its test does
something to the session (raytf issue 70: the standbys released mid-run). Each step's row has its process id."""

import argparse
import os
import time

import tensorflow as tf

import raytf

parser = argparse.ArgumentParser()
parser.add_argument("--started-file", required=True)
parser.add_argument("--go-file", required=True)
parser.add_argument("--steps", type=int, default=10)
parser.add_argument("--hold-at", type=int, default=3)
parser.add_argument("--timeout-s", type=float, default=120.0)
args = parser.parse_args()
rank = int(os.environ["RAYTF_RANK"])
strategy = tf.distribute.MultiWorkerMirroredStrategy()


@tf.function
def step():
    return strategy.run(lambda: tf.distribute.get_replica_context().all_reduce("sum", tf.constant(1.0)))


for i in range(1, args.steps + 1):
    step()
    if i == args.hold_at:
        if rank == 0:
            open(args.started_file, "w").close()
        deadline = time.monotonic() + args.timeout_s
        while not os.path.exists(args.go_file):  # (the test's signal, polled; bounded: a test never hangs)
            if time.monotonic() > deadline:
                raise TimeoutError(f"{args.go_file} did not appear within {args.timeout_s:.0f}s")
            time.sleep(0.05)
    raytf.report({"pid": float(os.getpid())}, step=i)
raytf.report({"steps": float(i)}, epoch=1, kind="epoch")
