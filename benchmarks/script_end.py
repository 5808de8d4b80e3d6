"""A script run's end on a busy machine (raytf issue 53, "every run fast"): many short script-mode runs on one running
Ray, beside a process that keeps a core busy (as CI's other slow-tier process does), and how long each one's end took.

Run:  python -m benchmarks.script_end [--runs 60] [--busy 1]
      python -m benchmarks.script_end --smoke     (two runs, nothing busy: the check that it runs)

The runs alternate the documentation's two script examples (conf/tutorial_keras.yaml, conf/script.yaml), shortened
as its test of them does (tests/ray/test_docs_snippets_train.py), each through the CLI on the running Ray. Per run:
its wall time, and from its timeline (result.json) the last step to the driver seeing the training's end. Meanwhile
/proc is read every 0.1 s for script processes that have exited but are not reaped yet (zombies whose parent is a
task actor), and how long each stayed so. A task once waited for that reap before its run could end, and the
kernel's release of an exited TensorFlow process took tens of seconds now and then (raytf/_task/script/spawn.py's
`wait_exit`); a task now learns the exit without the reap and reaps on a thread of its own. So a long reap here with
no run's end held up by it is the fix working; a long end is a regression.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CONFS = ("conf/tutorial_keras.yaml", "conf/script.yaml")
SHORT = ("train.epochs=1", "train.steps_per_epoch=2", "train.params.validation_steps=1", "metrics.every_steps=1",
         "cluster.standby=0")
_POLL_S = 0.1


def _read(path: str) -> str:
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return ""


def zombie_of_a_task(stat: str, parent_cmdline: str) -> bool:
    """Whether a /proc/<pid>/stat line is an exited, unreaped process of a task actor (its parent's cmdline: Ray's
    process title, `ray::TaskActor...`). Pure."""
    state = stat.rsplit(")", 1)[-1].split()[:1]
    return state == ["Z"] and "TaskActor" in parent_cmdline


@dataclass
class Zombies:
    """Exited, unreaped processes of task actors, watched in /proc: (pid, start ticks) -> first and last time seen."""

    seen: dict[tuple[int, str], list[float]] = field(default_factory=dict)

    def scan(self) -> None:
        now = time.monotonic()
        for name in os.listdir("/proc"):
            if not name.isdigit():
                continue
            stat = _read(f"/proc/{name}/stat")
            fields = stat.rsplit(")", 1)[-1].split()
            if len(fields) < 20 or fields[0] != "Z":
                continue
            if zombie_of_a_task(stat, _read(f"/proc/{fields[1]}/cmdline")):
                self.seen.setdefault((int(name), fields[19]), [now, now])[1] = now

    def longest(self) -> float:
        return max((last - first for first, last in self.seen.values()), default=0.0)


def watch(zombies: Zombies, stop: threading.Event) -> None:
    while not stop.wait(_POLL_S):
        zombies.scan()


def one(address: str, conf: str, scratch: Path) -> dict:
    """One run of `conf` through the CLI on the Ray at `address`: its wall, and its end from its timeline."""
    began = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "raytf.launch", conf, *SHORT, f"storage.path={scratch}",
                           "--address", address], cwd=ROOT, capture_output=True, text=True)
    wall = time.monotonic() - began
    if proc.returncode != 0:
        raise SystemExit(f"{conf} failed (exit {proc.returncode}):\n{proc.stderr[-2000:]}")
    (result,) = scratch.rglob("result.json")
    phases = json.loads(result.read_text())["timeline"]["phases"]
    return {"conf": conf, "wall_s": wall, "end_s": phases["training_end_seen"] - phases["last_step"]}


def summary(rows: list[dict], unreaped: int, longest_s: float) -> str:
    """The table (markdown) of the runs' `rows`. Pure."""
    walls = [r["wall_s"] for r in rows]
    ends = [r["end_s"] for r in rows]
    slow = sum(w > 2 * statistics.median(walls) for w in walls)
    return "\n".join([
        "| runs | wall s, median (max) | last step -> end seen s, median (max) | runs over 2x the median wall "
        "| script processes seen exited, unreaped | the longest unreaped s |",
        "|---|---|---|---|---|---|",
        f"| {len(rows)} | {statistics.median(walls):.1f} ({max(walls):.1f}) | {statistics.median(ends):.2f} "
        f"({max(ends):.2f}) | {slow} | {unreaped} | {longest_s:.1f} |"])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.script_end", description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=60)
    ap.add_argument("--busy", type=int, default=1, help="CPU-bound processes beside the runs (normal priority)")
    ap.add_argument("--smoke", action="store_true")
    args = ap.parse_args(argv)
    runs, busy = (2, 0) if args.smoke else (args.runs, args.busy)
    import ray

    ray.init(num_cpus=2, include_dashboard=False)
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(busy)]
    zombies, stop = Zombies(), threading.Event()
    watcher = threading.Thread(target=watch, args=(zombies, stop), daemon=True)
    watcher.start()
    rows = []
    try:
        with tempfile.TemporaryDirectory(prefix="raytf-script-end-") as tmp:
            for n in range(runs):
                row = one(ray.get_runtime_context().gcs_address, CONFS[n % len(CONFS)], Path(tmp) / str(n))
                rows.append(row)
                print(f"run {n + 1}/{runs} {row['conf']}: wall {row['wall_s']:.1f} s, end {row['end_s']:.2f} s, "
                      f"the longest unreaped so far {zombies.longest():.1f} s", flush=True)
    finally:
        stop.set()
        watcher.join()
        for h in hogs:
            h.kill()
            h.wait()
        ray.shutdown()
    print(f"\n{busy} busy process(es) beside the runs\n")
    print(summary(rows, len(zombies.seen), zombies.longest()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
