"""The cost of raytf's metrics collection on step time: metrics every step vs none, same run otherwise,
interleaved. Step time comes from rank 0's epoch-end times (after the first epoch), so the off case is measured
the same way as the on case.

Run: python -m benchmarks.overhead [--repeats 2] [--epochs 6] [--steps 40]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile

import ray

import raytf


def step_time(result) -> float:
    df = result.metrics
    ep = df[(df["kind"] == "epoch") & (df["rank"] == 0)].sort_values("epoch")
    return (ep["time"].iloc[-1] - ep["time"].iloc[0]) / (ep["step"].iloc[-1] - ep["step"].iloc[0])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--epochs", type=int, default=6)
    ap.add_argument("--steps", type=int, default=40)
    args = ap.parse_args()
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    storage = tempfile.mkdtemp(prefix="raytf-bench-")
    common = [f"storage.path={storage}", f"train.epochs={args.epochs}", f"train.steps_per_epoch={args.steps}",
              "train.batch_size=32"]
    setups = {
        "metrics every step + epoch ckpt": ["metrics.every_steps=1", "checkpoint.every_epochs=1"],
        "metrics every step": ["metrics.every_steps=1", "checkpoint.every_epochs=0"],
        "metrics every 10 steps (default)": ["metrics.every_steps=10", "checkpoint.every_epochs=0"],
        "metrics per epoch only": ["metrics.every_steps=0", "checkpoint.every_epochs=0",
                                   "failure.heartbeat_s=1000", "failure.hang_timeout_s=2000"],
    }
    times: dict[str, list[float]] = {k: [] for k in setups}
    for i in range(args.repeats):
        for j, (name, extra) in enumerate(setups.items()):
            r = raytf.fit("conf/local.yaml", [*common, *extra, f"run.name=ovh-{i}-{j}"], quiet=True)
            r.raise_for_status()
            times[name].append(step_time(r))
    ray.shutdown()
    base = statistics.median(times["metrics per epoch only"])
    print(f"\n{'setup':34} {'step ms (median)':>17} {'ratio':>7}  runs")
    for name, ts in times.items():
        m = statistics.median(ts)
        print(f"{name:34} {m * 1000:17.2f} {m / base:7.3f}  {[round(float(t) * 1000, 2) for t in ts]}")


if __name__ == "__main__":
    main()
