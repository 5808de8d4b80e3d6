"""A custom training loop on MultiWorkerMirroredStrategy for the standby tests: --steps steps (a retry: 20) of
--step-s seconds, an all-reduce each; in attempt 1, rank 1 SIGKILLs itself once the file --fail-file exists (the
test creates it when it is ready for the failure). Each step's row says which process ran it (`pid`) and whether
that process was a warm child (`warm`: started, TensorFlow imported, before its script was known:
raytf/_task/script/spawn.py)."""

import argparse
import os
import signal
import time

import tensorflow as tf

import raytf

parser = argparse.ArgumentParser()
parser.add_argument("--fail-file", required=True)
parser.add_argument("--steps", type=int, default=20)
parser.add_argument("--step-s", type=float, default=0.02)
args = parser.parse_args()
with open("/proc/self/cmdline", "rb") as f:
    warm = float(b"--warm" in f.read().split(b"\0"))
rank, attempt = int(os.environ["RAYTF_RANK"]), int(os.environ["RAYTF_ATTEMPT"])
strategy = tf.distribute.MultiWorkerMirroredStrategy()


@tf.function
def step():
    return strategy.run(lambda: tf.distribute.get_replica_context().all_reduce("sum", tf.constant(1.0)))


for i in range(1, (args.steps if attempt == 1 else 20) + 1):
    step()
    if rank == 1 and attempt == 1 and os.path.exists(args.fail_file):
        os.kill(os.getpid(), signal.SIGKILL)  # a worker killed (OOM killer, a crash): a retried failure
    time.sleep(args.step_s)  # the model's compute (the same on every rank: none is slower)
    raytf.report({"pid": float(os.getpid()), "warm": warm}, step=i)
raytf.report({"steps": float(i)}, epoch=1, kind="epoch")
