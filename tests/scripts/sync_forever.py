"""Writes a checkpoint, asks raytf to sync it, then waits forever: when the upload fails, raytf must stop
this script instead of letting it train on with nothing saved."""

import os
import threading

import raytf

ckpt = os.path.join(os.environ["RAYTF_CHECKPOINT_DIR"], "weights.txt")
for step in (1, 2):
    with open(ckpt, "w") as f:
        f.write(f"step {step}")
    raytf.report({"loss": 1.0 / step}, step=step, checkpoint=True)
print("checkpoints handed over", flush=True)
threading.Event().wait()
