"""Prints where and how it runs as one line, `PLACE {json}`: what a warm child (raytf/_task/script/spawn.py) must give
a script exactly as a cold one does (tests/task/test_warm_child.py)."""

import gc
import json
import os
import sys

import tensorflow as tf

with open("/proc/self/cmdline", "rb") as f:
    warm = b"--warm" in f.read().split(b"\0")
print("PLACE " + json.dumps({
    "argv": sys.argv, "cwd": os.getcwd(), "path": sys.path, "env": dict(os.environ), "name": __name__,
    "unbuffered": sys.stdout.write_through, "keras": type(tf.keras.layers.Dense(1)).__module__.split(".")[0],
    "threads": [tf.config.threading.get_intra_op_parallelism_threads(),
                tf.config.threading.get_inter_op_parallelism_threads()],
    "own_group": os.getpgid(0) == os.getpid(), "warm": warm,
    "frozen": gc.get_freeze_count() > 10_000,  # TensorFlow's import, frozen before the script (child.py)
}), flush=True)
