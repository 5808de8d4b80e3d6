"""Repeat runs the way notebooks, loops and sweeps make them (raytf issue 53): one Python session, one Ray, several
`raytf.fit` calls of the same job right after each other (and with a pause between), and a `raytf.sweep` of trials;
against the same program launched by hand, side by side in one run.

Run:  python -m benchmarks.back_to_back [--runs 4] [--pause 10] [--trials 4]
      python -m benchmarks.back_to_back --standby-memory   (what a session's ready standbys hold in memory)
      python -m benchmarks.back_to_back --smoke     (two short runs of each series: the check that it runs)

Every contender runs benchmarks/workload.py's program (benchmarks/run.py's `hand` is the floor: N processes with
their TF_CONFIG, started by hand). Series, each starting with no standby processes (the pool released):
function and script back-to-back, each with the default cluster.standby and with cluster.standby=0 (no standbys:
every run's tasks import TensorFlow themselves), function and script with `--pause` seconds between runs; then a
sweep of `--trials`
trials (a grid over train.params.tag, which changes nothing of the job). Per run: its wall time (the `raytf.fit`
call), wall / the hand-launched median, how many tasks started in standbys; per sweep trial: the gap from the
previous trial's end to this one's first step. Nothing waits for the standbys between back-to-back runs: a run that
finds them still importing TensorFlow takes them (standby.StandbyPool.take), as a notebook's loop would.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.run import _LEAN, ROOT, WORKLOAD, Setup, _measure, hand


def _cfg(s: Setup, out: Path, name: str, script: bool, standby: int | None = None):
    import raytf

    program = (["train.entrypoint=", f"train.script={WORKLOAD}", "train.stream_output=none",
                f"train.args=[--out,{out},--epochs,'{s.epochs}',--steps,'{s.steps}',--batch,'{s.batch}']"]
               if script else ["train.entrypoint=benchmarks.workload:train", f"train.params.out={out}"])
    return raytf.load_config(ROOT / "conf/local.yaml", [
        f"storage.path={s.scratch / 'runs'}", f"run.name={name}", f"train.epochs={s.epochs}",
        f"train.steps_per_epoch={s.steps}", f"train.batch_size={s.batch}", f"cluster.num_workers={s.workers}",
        "checkpoint.resume=false", *_LEAN, *program,
        *([f"cluster.standby={standby}"] if standby is not None else [])])


def series(s: Setup, label: str, runs: int, *, script: bool = False, pause_s: float = 0.0,
           standby: int | None = None) -> list[dict]:
    """`runs` raytf.fit calls of the job, one after the other (`pause_s` between), from no standbys (`standby`:
    cluster.standby, the default's where None)."""
    import raytf

    raytf.release_standbys()
    rows = []
    for i in range(runs):
        if i and pause_s:
            time.sleep(pause_s)  # the user's pause between two cells: the measured condition, not a wait for a signal
        name = f"{''.join(c if c.isalnum() else '-' for c in label)}-{i}"
        out = s.scratch / name
        t = time.time()
        result = raytf.fit(_cfg(s, out, name, script, standby), quiet=True, raise_on_failure=False)
        wall = time.time() - t
        attempt = result.summary["attempts"][0] if result.summary.get("attempts") else {}
        rows.append({"series": label, "run": i + 1, "wall_s": wall, "ok": result.status == "succeeded",
                     "standby_tasks": attempt.get("standby_tasks", 0),
                     "first_step_s": (attempt.get("first_step_at") or t) - t,
                     "step_ms": _measure(label, t, wall, out, s.batch * s.workers).step_ms})
        print(f"{label} run {i + 1}/{runs}: wall {wall:.1f}s, {rows[-1]['standby_tasks']} task(s) in standbys, "
              f"first step {rows[-1]['first_step_s']:.1f}s, median step {_ms(rows[-1]['step_ms'])}", flush=True)
    raytf.release_standbys()
    return rows


def _ms(step_ms: float | None) -> str:
    return "-" if step_ms is None else f"{step_ms:.0f}ms"


def sweep(s: Setup, trials: int) -> list[dict]:
    """A grid of `trials` trials, one at a time: each trial's first step after the previous trial's end."""
    import raytf

    raytf.release_standbys()
    out = s.scratch / "sweep"
    frame = raytf.sweep(_cfg(s, out, "sweep", False), space={"train.params.tag": list(range(trials))}, name="b2b")
    raytf.release_standbys()
    rows = []
    for run_dir in frame["run_dir"]:
        r = json.loads((Path(run_dir) / "result.json").read_text())
        a = r["attempts"][0]
        rows.append({"started_at": r["started_at"], "ended_at": r["ended_at"], "first_step_at": a["first_step_at"],
                     "standby_tasks": a.get("standby_tasks", 0), "ok": r["status"] == "succeeded"})
    rows.sort(key=lambda x: x["started_at"])
    for before, row in itertools.pairwise(rows):
        row["gap_s"] = row["first_step_at"] - before["ended_at"]
    return rows


def _memory_mib(pid: int) -> tuple[float, float]:
    """(resident, private) MiB of `pid` and its descendants (a script standby's warm child), from smaps_rollup."""
    from pathlib import Path as P

    rss = private = 0.0
    todo = [pid]
    while todo:
        p = todo.pop()
        try:
            fields = dict(line.split(":", 1) for line in P(f"/proc/{p}/smaps_rollup").read_text().splitlines()[1:])
            children = P(f"/proc/{p}/task/{p}/children").read_text().split()
        except OSError:
            continue
        kib = {k: float(v.split()[0]) for k, v in fields.items()}
        rss += kib.get("Rss", 0) / 1024
        private += (kib.get("Private_Clean", 0) + kib.get("Private_Dirty", 0)) / 1024
        todo += [int(c) for c in children]
    return rss, private


def standby_memory(s: Setup) -> list[dict]:
    """What a session's ready standbys hold, a function's and a script's: one short run of each, its standbys
    (asked for as it ended) waited for, each one's memory (its process and, for a script's, its warm child)."""
    import raytf
    from raytf._driver import standby

    rows = []
    for label, script in (("function", False), ("script", True)):
        raytf.release_standbys()
        name = f"memory-{label}"
        raytf.fit(_cfg(s, s.scratch / name, name, script), quiet=True, raise_on_failure=False)
        standby.wait_ready(2, 120)
        for pid in standby.pool(create=False).pids():
            rss, private = _memory_mib(pid)
            rows.append({"kind": label, "pid": pid, "rss_mib": rss, "private_mib": private})
    raytf.release_standbys()
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.back_to_back", description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=4, help="per series")
    ap.add_argument("--pause", type=float, default=10.0, help="seconds between the runs of the paused series")
    ap.add_argument("--trials", type=int, default=4, help="of the sweep")
    ap.add_argument("--hand", type=int, default=3, help="hand-launched runs (their median is the floor)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--steps", type=int, default=50, help="per epoch")
    ap.add_argument("--batch", type=int, default=64, help="per replica")
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--standby-memory", action="store_true",
                    help="only what a session's ready standbys hold in memory (a function's, a script's)")
    a = ap.parse_args(argv)
    if a.smoke:
        a.runs, a.trials, a.hand, a.pause, a.epochs, a.steps = 2, 2, 1, 1.0, 1, 5
    os.chdir(ROOT)  # raytf's tasks import benchmarks.workload from the driver's working directory
    scratch = Path(tempfile.mkdtemp(prefix="raytf-b2b-"))
    s = Setup(a.workers, a.epochs, a.steps, a.batch, scratch)
    import ray

    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    try:
        if a.standby_memory:
            print("| standby of | pid | resident MiB | of it its own MiB |\n|---|---|---|---|")
            for r in standby_memory(s):
                print(f"| {r['kind']} | {r['pid']} | {r['rss_mib']:.0f} | {r['private_mib']:.0f} |")
            return 0
        floor, floor_steps = [], []
        for i in range(a.hand):
            trial = hand(s, scratch / f"hand-{i}")
            floor.append(trial.wall_s)
            floor_steps.append(trial.step_ms)
            print(f"hand-launched run {i + 1}/{a.hand}: wall {trial.wall_s:.1f}s, median step {_ms(trial.step_ms)}" +
                  (f" ERROR {trial.error}" if trial.error else ""), flush=True)
        rows = [*series(s, "function", a.runs), *series(s, "function, standby=0", a.runs, standby=0),
                *series(s, "script", a.runs, script=True),
                *series(s, "script, standby=0", a.runs, script=True, standby=0),
                *series(s, f"function, {a.pause:g}s pause", a.runs, pause_s=a.pause),
                *series(s, f"script, {a.pause:g}s pause", a.runs, script=True, pause_s=a.pause)]
        trials = sweep(s, a.trials)
    finally:
        ray.shutdown()
        shutil.rmtree(scratch, ignore_errors=True)
    base = statistics.median(floor)
    steps = [x for x in floor_steps if x is not None]
    print(f"\nhand-launched: {base:.1f}s (median of {len(floor)}), its median step "
          f"{_ms(statistics.median(steps) if steps else None)}; {a.workers} workers, {a.epochs} epochs x {a.steps} "
          f"steps, batch {a.batch} per replica; {os.cpu_count()} CPUs\n")
    # The median step (after epoch 1) says what the standbys asked for at a run's first step cost its training:
    # they import TensorFlow beside it (_driver/standby.py's REFILL_AFTER_S).
    print("| series | run walls s | ÷ hand | tasks in standbys | median step | runs 2+: max ÷ hand |")
    print("|---|---|---|---|---|---|")
    ok = all(r["ok"] for r in rows) and all(t["ok"] for t in trials)
    for label in dict.fromkeys(r["series"] for r in rows):
        mine = [r for r in rows if r["series"] == label]
        worst = max(r["wall_s"] / base for r in mine[1:]) if len(mine) > 1 else float("nan")
        walls = ", ".join(f"{r['wall_s']:.1f}" for r in mine)
        ratios = ", ".join(f"{r['wall_s'] / base:.2f}" for r in mine)
        took = ", ".join(str(r["standby_tasks"]) for r in mine)
        step = ", ".join(_ms(r["step_ms"]) for r in mine)
        print(f"| {label} | {walls} | {ratios} | {took} | {step} | {worst:.2f} |")
    gaps = [t["gap_s"] for t in trials if "gap_s" in t]
    took = ", ".join(str(t["standby_tasks"]) for t in trials)
    print(f"\nsweep of {len(trials)} trials: previous trial's end -> this trial's first step: "
          + ", ".join(f"{g:.1f}s" for g in gaps) + f" (max {max(gaps, default=0):.1f}s); tasks in standbys per "
          f"trial: {took}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
