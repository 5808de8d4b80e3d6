"""A hand-launch script that sets its own TF_CONFIG (hard-coded, as the seed articles do) and exits 3 on
worker 1: raytf must keep its own TF_CONFIG (so the index is right) and report rank 1 with code 3.

Each worker first starts a helper process that never ends by itself and holds the script's stdout (as a
TensorBoard started from a script would): raytf must take it down with the script, whether the script exits
(worker 1) or its task is torn down (worker 0)."""

import json
import os
import subprocess
import sys

subprocess.Popen([sys.executable, "-c", "import threading; threading.Event().wait()", "raytf-test-helper",
                  os.environ.get("RAYTF_RANK", "-")])

os.environ["TF_CONFIG"] = json.dumps({"cluster": {"worker": ["10.0.0.1:12345", "10.0.0.2:12345"]},
                                      "task": {"type": "worker", "index": 0}})
task = json.loads(os.environ["TF_CONFIG"])["task"]
if task["index"] == 1:
    print(f"worker {task['index']}: giving up, no data shard for me", file=sys.stderr)
    sys.exit(3)

import tensorflow as tf  # noqa: E402

strategy = tf.distribute.MultiWorkerMirroredStrategy()  # waits for worker 1, which never comes
print("worker 0 should never get here", flush=True)
