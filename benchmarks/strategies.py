"""MWMS vs ParameterServerStrategy on the same model and machine, interleaved (A B A B ...).

Run: python -m benchmarks.strategies [--repeats 2] [--steps 40] [--epochs 4]
Prints steady-state examples/s (median over step reports after the first epoch) and wall time per run.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

import ray

import raytf


def _steady(result, rank_role: str, examples_per_step: int) -> float:
    df = result.metrics
    steps = df[(df["kind"] == "step") & (df["role"] == rank_role) & (df["epoch"] > 1)]
    return statistics.median(steps["steps_per_s"].dropna()) * examples_per_step


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--epochs", type=int, default=4)
    ap.add_argument("--batch", type=int, default=32)
    args = ap.parse_args()
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    storage = tempfile.mkdtemp(prefix="raytf-bench-")
    common = [f"storage.path={storage}", f"train.epochs={args.epochs}", f"train.steps_per_epoch={args.steps}",
              f"train.batch_size={args.batch}", "metrics.every_steps=5", "checkpoint.every_epochs=0"]
    # Same CNN and data; MWMS: 2 workers x batch per step; PS: each worker step is one batch.
    setups = {
        "mwms (2 workers)": ("conf/local.yaml", [], "worker", 2 * args.batch),
        "ps (chief + 2 workers + 1 ps)": ("conf/ps_local.yaml", [], "chief", args.batch),
    }
    rows: dict[str, list[tuple[float, float]]] = {k: [] for k in setups}
    for i in range(args.repeats):
        for name, (conf, extra, role, per_step) in setups.items():
            t0 = time.perf_counter()
            result = raytf.fit(conf, [*common, *extra, f"run.name=bench-{role}-{i}"], quiet=True)
            wall = time.perf_counter() - t0
            result.raise_for_status()
            rows[name].append((_steady(result, role, per_step), wall))
    ray.shutdown()
    print(f"\n{'setup':32} {'examples/s (median)':>20} {'wall s (median)':>16}  runs")
    base = None
    for name, vals in rows.items():
        eps = statistics.median(v[0] for v in vals)
        wall = statistics.median(v[1] for v in vals)
        base = base or eps
        print(f"{name:32} {eps:20.0f} {wall:16.1f}  {len(vals)}   ratio to mwms {eps / base:.2f}")


if __name__ == "__main__":
    main()
