"""Two task-like actors started with and without a per-actor runtime_env, side by side (issue 38's cold launch).

Run:  python -m benchmarks.actor_start [--rounds 4]

raytf gives each task actor a runtime_env (its env_vars: TF_USE_LEGACY_KERAS, OMP_NUM_THREADS, ...), so Ray starts a
new worker process for it and keeps the ones it pre-started idle. Each round starts a fresh local Ray (2 CPUs, token
auth, as raytf's embedded one), makes two 1-CPU actors at once and asks each for its pid (`first`), kills them, and
does it again on the same Ray (`again`); the two ways alternate by round. Medians.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time


def _start_two(actor_class, options: dict) -> float:
    import ray

    t = time.perf_counter()
    actors = [actor_class.options(**options).remote() for _ in range(2)]
    ray.get([a.pid.remote() for a in actors])
    took = time.perf_counter() - t
    for a in actors:
        ray.kill(a, no_restart=True)
    return took


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.actor_start", description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=4, help="fresh Ray instances, alternating the two ways")
    a = ap.parse_args(argv)
    os.environ.setdefault("RAY_AUTH_MODE", "token")  # (before Ray's import: it reads it then) as raytf starts Ray
    import ray

    @ray.remote(num_cpus=1)
    class Task:
        def pid(self) -> int:
            return os.getpid()

    ways = {"runtime_env (env_vars), as raytf's tasks": {"runtime_env": {"env_vars": {"TF_USE_LEGACY_KERAS": "1"}}},
            "no runtime_env": {}}
    times: dict[str, dict[str, list[float]]] = {w: {"first": [], "again": []} for w in ways}
    for i in range(a.rounds):
        way = list(ways)[i % 2]
        ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
        try:
            times[way]["first"].append(_start_two(Task, ways[way]))
            times[way]["again"].append(_start_two(Task, ways[way]))
        finally:
            ray.shutdown()
    print("| two actors started and answering | first on a fresh Ray, median s | again on it, median s | rounds |")
    print("|---|---|---|---|")
    for way, t in times.items():
        if t["first"]:
            print(f"| {way} | {statistics.median(t['first']):.3f} | {statistics.median(t['again']):.3f} | "
                  f"{len(t['first'])} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
