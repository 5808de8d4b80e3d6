"""Keras 3 against tf-keras on the same model and data under raytf (raytf issue 72), side by side in one run: the
speed of a 2-worker MWMS fit (whole fit, and steady steps/s: the epochs after the first), and how exactly each
trains: the 2 workers' final weights against one process's with the same global batch and seed, and rank 0's
against rank 1's. Keras 3 rebuilds its distributed iterator at every epoch when fit's steps_per_epoch is unset: the
row "keras 3, steps_per_epoch unset" measures that (the data, 8 batches, not repeated).

Run:  python -m benchmarks.keras3 [--epochs 6] [--rounds 1]

Each measurement is `raytf.fit` of tests.train_fns:keras3_fit (Dense 8-16-1, 256 rows, global batch 32, 8 steps an
epoch) on an embedded local Ray of 2 CPUs, in a fresh driver process; times are the fit's own, measured in rank 0.
2 cores and seconds-long fits say nothing of a real node's speed: the ratios are the point.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

_CHILD = r"""
import json, sys
import ray, raytf
keras, workers, steps, epochs, path = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
ray.init(address="local", num_cpus=2, include_dashboard=False, configure_logging=False, log_to_driver=False)
cfg = raytf.load_config("conf/local.yaml", [f"storage.path={path}", "run.name=k",
    "train.entrypoint=tests.train_fns:keras3_fit", f"train.params.keras={keras}",
    f"train.params.steps_per_epoch={steps}", f"train.epochs={epochs}", f"cluster.num_workers={workers}",
    "cluster.standby=0", "checkpoint.export_model=false"])
result = raytf.fit(cfg, quiet=True)
ranks = []
for rank in range(workers):
    with open(f"{result.run_dir}/logs/worker{rank}-attempt1/exact.json") as f:
        ranks.append(json.load(f))
print(json.dumps({"status": result.status, "ranks": ranks}))
ray.shutdown()
"""

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STEPS = 8
VARIANTS = [("keras 3", "keras", STEPS), ("tf-keras", "tf_keras", STEPS),
            ("keras 3, steps_per_epoch unset", "keras", 0)]


def measure(keras: str, workers: int, steps: int, epochs: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="raytf-bench-keras3-") as tmp:
        env = {**os.environ, "RAY_AUTH_MODE": "token"}
        out = subprocess.run([sys.executable, "-c", _CHILD, keras, str(workers), str(steps), str(epochs), tmp],
                             cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800)
        lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
        if out.returncode != 0 or not lines:
            raise SystemExit(f"{keras} workers={workers}: exit {out.returncode}\n{out.stderr[-2000:]}")
        return json.loads(lines[-1])


def max_difference(a: list, b: list) -> float:
    import numpy as np

    return max(float(np.max(np.abs(np.asarray(x) - np.asarray(y)))) for x, y in zip(a, b, strict=True))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.keras3", description=__doc__.splitlines()[0])
    ap.add_argument("--epochs", type=int, default=6)
    ap.add_argument("--rounds", type=int, default=1)
    a = ap.parse_args(argv)
    rows: dict[str, list[dict]] = {}
    for _ in range(a.rounds):
        for name, keras, steps in VARIANTS:
            two = measure(keras, 2, steps, a.epochs)
            one = measure(keras, 1, steps, a.epochs) if steps else None
            r0, r1 = two["ranks"]
            row = {"fit_s": r0["fit_s"], "steady": STEPS * (a.epochs - 1) / sum(r0["epoch_s"][1:]),
                   "first_epoch_s": r0["epoch_s"][0],
                   "vs_one": max_difference(one["ranks"][0]["weights"], r0["weights"]) if one else None,
                   "ranks": max_difference(r0["weights"], r1["weights"]),
                   "loss_gap": abs(one["ranks"][0]["loss"] - r0["loss"]) if one else None}
            rows.setdefault(name, []).append(row)
            print(f"  {name}: {row}", file=sys.stderr, flush=True)
    base = statistics.median(r["fit_s"] for r in rows["tf-keras"])
    base_steady = statistics.median(r["steady"] for r in rows["tf-keras"])
    print(f"{a.epochs} epochs of {STEPS} steps, 2 workers, {a.rounds} round(s), medians")
    print("| keras | whole fit s | first epoch s | steady steps/s | fit ÷ tf-keras | steady ÷ tf-keras | "
          "max \\|w₂ - w₁\\| vs one process | max \\|rank 0 - rank 1\\| | evaluate loss gap vs one process |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, rs in rows.items():
        fit = statistics.median(r["fit_s"] for r in rs)
        steady = statistics.median(r["steady"] for r in rs)
        first = statistics.median(r["first_epoch_s"] for r in rs)
        vs = "—" if rs[-1]["vs_one"] is None else f"{max(r['vs_one'] for r in rs):.1e}"
        gap = "—" if rs[-1]["loss_gap"] is None else f"{max(r['loss_gap'] for r in rs):.1e}"
        print(f"| {name} | {fit:.2f} | {first:.2f} | {steady:.1f} | {fit / base:.2f} | {steady / base_steady:.2f} | "
              f"{vs} | {max(r['ranks'] for r in rs):.1e} | {gap} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
