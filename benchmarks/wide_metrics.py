"""A program that reports many metric names (per class, per layer): the driver's time and peak memory with 10 and
with 10,000 names a step row, at two run lengths, side by side (raytf issue 71: 10,000 names once grew the driver
to 11.5 GiB and did not finish in 7 minutes).

Run:  python -m benchmarks.wide_metrics [--names 10,10000] [--steps 100,400] [--rounds 1]

Each measurement is a fresh driver process (`raytf.fit` on an embedded local Ray of 2 CPUs, 2 workers,
tests.train_fns:many_names: no model, every step a row of N metrics from each rank, metrics.every_steps=1,
metrics.max_names raised to fit), so its peak RSS is its own. Wall time is the fit's; rows are metrics.parquet's.
The ratio columns compare each measurement with 10 names at the same length, in the same round.
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
import json, sys, threading, time
import psutil, ray, raytf
names, steps, path = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
peak = [0]
def watch():
    me = psutil.Process()
    while True:
        peak[0] = max(peak[0], me.memory_info().rss)
        time.sleep(0.1)
threading.Thread(target=watch, daemon=True).start()
ray.init(address="local", num_cpus=2, include_dashboard=False, configure_logging=False, log_to_driver=False)
cfg = raytf.load_config("conf/local.yaml", [f"storage.path={path}", "run.name=wide",
    "train.entrypoint=tests.train_fns:many_names", f"train.params.names={names}", f"metrics.max_names={names + 16}",
    "train.epochs=2", f"train.steps_per_epoch={steps // 2}", "metrics.every_steps=1", "cluster.standby=0",
    "checkpoint.export_model=false"])
t = time.perf_counter()
result = raytf.fit(cfg, quiet=True)
print(json.dumps({"status": result.status, "wall_s": time.perf_counter() - t, "peak_mib": peak[0] / 2**20,
                  "rows": len(result.metrics)}))
ray.shutdown()
"""

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def measure(names: int, steps: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="raytf-bench-wide-") as tmp:
        env = {**os.environ, "RAY_AUTH_MODE": "token"}
        out = subprocess.run([sys.executable, "-c", _CHILD, str(names), str(steps), tmp], cwd=ROOT, env=env,
                             capture_output=True, text=True, timeout=1800)
        lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
        if out.returncode != 0 or not lines:
            raise SystemExit(f"names={names} steps={steps}: exit {out.returncode}\n{out.stderr[-2000:]}")
        return json.loads(lines[-1])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.wide_metrics", description=__doc__.splitlines()[0])
    ap.add_argument("--names", default="10,10000", help="metric names a row, comma-separated (the first: baseline)")
    ap.add_argument("--steps", default="100,400", help="steps of each rank, comma-separated")
    ap.add_argument("--rounds", type=int, default=1)
    a = ap.parse_args(argv)
    names = [int(n) for n in a.names.split(",")]
    steps = [int(s) for s in a.steps.split(",")]
    results: dict[tuple[int, int], list[dict]] = {}
    for _ in range(a.rounds):
        for s in steps:
            for n in names:
                r = measure(n, s)
                results.setdefault((n, s), []).append(r)
                print(f"  names={n} steps={s}: {r}", file=sys.stderr, flush=True)
    print("| names a row | steps a rank | rows | status | wall s | peak driver RSS MiB | wall ÷ 10 names | "
          "RSS ÷ 10 names |")
    print("|---|---|---|---|---|---|---|---|")
    for s in steps:
        base = results[(names[0], s)]
        for n in names:
            rs = results[(n, s)]
            wall = statistics.median(r["wall_s"] for r in rs)
            peak = statistics.median(r["peak_mib"] for r in rs)
            bw = statistics.median(r["wall_s"] for r in base)
            bp = statistics.median(r["peak_mib"] for r in base)
            print(f"| {n} | {s} | {rs[-1]['rows']} | {rs[-1]['status']} | {wall:.1f} | {peak:.0f} | {wall / bw:.2f} | "
                  f"{peak / bp:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
