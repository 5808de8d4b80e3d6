"""The teardown's scratch sweep on an embedded Ray, two ways side by side (issue 38's cold launch): as a Ray task
(`sweep_scratch`, what a run sends to each node whose tasks do not share the driver's machine, namespaces and user: Ray
starts a worker process for it first) and in the driver's own process (`sweep_roots` of the roots the tasks report:
what a run does where they do, as on its embedded Ray). Each round starts two task-like actors that own a scratch
directory, kills them as a teardown does, and times the sweep that removes what they left; the two ways alternate.

Run:  python -m benchmarks.scratch_sweep [--rounds 10]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.scratch_sweep", description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=10, help="teardowns, alternating the two ways")
    a = ap.parse_args(argv)
    os.environ.setdefault("RAY_AUTH_MODE", "token")  # (before Ray's import: it reads it then) as raytf starts Ray
    import ray

    from raytf._task import scratch
    from raytf._task.actor import sweep_roots, sweep_scratch

    @ray.remote(num_cpus=1, runtime_env={"env_vars": {"TF_USE_LEGACY_KERAS": "1"}})  # a per-task env, as raytf's
    class Task:
        def __init__(self) -> None:
            scratch.own_tempdir()

        def pid(self) -> tuple[int, str]:
            return os.getpid(), scratch.root()

    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    times: dict[str, list[float]] = {"as a Ray task": [], "in the driver's process": []}
    try:
        for i in range(a.rounds):
            actors = [Task.remote() for _ in range(2)]
            pids, roots = zip(*ray.get([t.pid.remote() for t in actors]))
            for t in actors:
                ray.kill(t, no_restart=True)
            way = list(times)[i % 2]
            t0 = time.perf_counter()
            removed = ray.get(sweep_scratch.remote(pids)) if i % 2 == 0 else sweep_roots({roots[0]: pids})
            times[way].append(time.perf_counter() - t0)
            if len(removed) < 2:
                print(f"round {i}: the sweep removed {removed}, not the two tasks' directories", file=sys.stderr)
                return 1
    finally:
        ray.shutdown()
    print("| the sweep | median s | each s |\n|---|---|---|")
    for way, v in times.items():
        print(f"| {way} | {statistics.median(v):.3f} | {', '.join(f'{x:.3f}' for x in v)} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
