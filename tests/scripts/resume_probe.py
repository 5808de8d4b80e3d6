"""Run as a module (train.module): counts its launches in $RAYTF_CHECKPOINT_DIR/state.json, which raytf
restores on a relaunch, and reports a custom-loop metric with raytf.report."""

import json
import os

import raytf

path = os.path.join(os.environ["RAYTF_CHECKPOINT_DIR"], "state.json")
launches = 0
if os.path.exists(path):
    with open(path) as f:
        launches = json.load(f)["launches"]
print(f"resumed_from={os.environ['RAYTF_RESUMED_FROM'] or '-'} launches_before={launches}", flush=True)
for step in range(1, 4):
    raytf.report({"loss": 1.0 / step, "launches": launches + 1}, step=launches * 3 + step)
with open(path, "w") as f:
    json.dump({"launches": launches + 1}, f)
raytf.report({"done": 1.0}, epoch=launches + 1, kind="epoch", checkpoint=True)
