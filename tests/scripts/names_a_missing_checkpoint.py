"""Leaves a TF checkpoint state file naming a checkpoint whose files are not there, asks raytf to sync, then waits
forever: raytf's copy can never hold what it names, so raytf must stop the script with its own storage error."""

import os
import threading

import raytf

with open(os.path.join(os.environ["RAYTF_CHECKPOINT_DIR"], "checkpoint"), "w") as f:
    f.write('model_checkpoint_path: "ckpt-7"\nall_model_checkpoint_paths: "ckpt-7"\n')
raytf.report({"loss": 1.0}, step=1, checkpoint=True)
threading.Event().wait()
