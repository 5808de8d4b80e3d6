"""Recovery time with and without standby task processes (cluster.standby), side by side on one running Ray.

Run:  python -m benchmarks.recovery [--rounds 3] [--script] [--early] [--session]
      python -m benchmarks.recovery --smoke      (one short round with standbys: the CI check that it runs)

The benchmark job (benchmarks/workload.py's CNN, 2 MWMS workers, a checkpoint every epoch) is launched with
`raytf.fit` (`--script`: the same program run unmodified, train.script, without checkpoints; its standbys hold a
child process with TensorFlow imported, raytf/_task/script/spawn.py); once it trains (and, with standbys, once the
pool holds them ready), rank 1 SIGKILLs itself. The table gives, per setting, the median over rounds of: detection
(the kill -> the driver ending the attempt), recovery (`recovery_s` in result.json: the attempt's end -> the next
attempt's first step, the issue's "failure detected -> next first step"), that recovery split at the moment the
retry's training code began (the workload's own mark: raytf's part before it, the program's after) and the run's
wall time. Rounds interleave the settings (standby 0, 2, 0, 2, ...); the pool is released between runs, so each run
with standbys starts from none. `--session`: it is not (as in a notebook's loop of runs): a run with standbys then
starts in those the previous one asked for as it ended; the table adds the rounds after the first.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def one(scratch: Path, n: int, standby_n: int, steps: int, after_s: float = 12.0, script: bool = False,
        early: bool = False, release: bool = True) -> dict:
    import raytf
    from raytf._driver import standby

    out = scratch / f"r{n}-s{standby_n}"
    out.mkdir(parents=True)
    kill_file = out / "kill"
    cfg = raytf.load_config(ROOT / "conf/local.yaml", [
        f"storage.path={scratch / 'runs'}", f"run.name=rec-{n}-{standby_n}", "train.epochs=3",
        f"train.steps_per_epoch={steps}", "train.batch_size=64", "checkpoint.every_epochs=1",
        "checkpoint.export_model=false", "metrics.every_steps=10", f"cluster.standby={standby_n}",
        *([f"train.script={ROOT / 'benchmarks/workload.py'}", "train.entrypoint=", "train.stream_output=none",
           f"train.args=[--out,{out},--epochs,'3',--steps,'{steps}',--batch,'64',--kill-file,{kill_file}]"]
          if script else ["train.entrypoint=benchmarks.workload:train_killed_once", f"train.params.out={out}",
                          f"train.params.kill_file={kill_file}"])])
    first_step = threading.Event()
    committed = threading.Event()
    done: dict = {}

    def on_event(e):
        if e.kind == "step":
            first_step.set()
        elif e.kind == "checkpoint":
            committed.set()

    def run():
        t = time.monotonic()
        done["result"] = raytf.fit(cfg, quiet=True, on_event=on_event, raise_on_failure=False)
        done["wall_s"] = time.monotonic() - t

    thread = threading.Thread(target=run)
    thread.start()
    first_step.wait(300)
    if early:  # right after the first committed checkpoint (the script saves none: its first step), standbys or not
        if not script:
            committed.wait(300)
        ready = None
    else:  # once the standbys are ready (with standbys), the same time after the first step without
        t = time.monotonic()
        ready = standby.wait_ready(2, 90) if standby_n else True
        time.sleep(max(0.0, after_s - (time.monotonic() - t)))  # the same moment in the run for both settings
    killed_at = time.time()
    kill_file.write_text("now")
    thread.join(600)
    if release:
        raytf.release_standbys()
    result = done["result"]
    attempts = result.summary["attempts"]
    row = {"round": n + 1, "standby": standby_n, "ok": result.status == "succeeded" and len(attempts) == 2,
           "ready": ready, "wall_s": done["wall_s"]}
    if len(attempts) >= 2:
        row.update(detect_s=attempts[0]["ended_at"] - killed_at, recovery_s=attempts[1]["recovery_s"],
                   standby_tasks=attempts[1]["standby_tasks"])
        started = program_start(out)
        if started is not None and attempts[1]["recovery_s"] is not None:
            row["to_program_s"] = started - attempts[0]["ended_at"]
            row["program_s"] = attempts[1]["recovery_s"] - row["to_program_s"]
    return row


def program_start(out: Path) -> float | None:
    """When the last rank's training code began (the workload's own `code_start` mark, wall clock), from the
    timing files its ranks wrote at their training's end: the retry's (a killed attempt's ranks never reach it)."""
    marks = [json.loads(f.read_text()).get("marks", {}).get("code_start") for f in out.glob("timing-*.json")]
    marks = [m for m in marks if m is not None]
    return max(marks) if marks else None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.recovery", description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=300, help="per epoch")
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--script", action="store_true", help="the program as a script (train.script)")
    ap.add_argument("--session", action="store_true",
                    help="keep the session's standby pool between runs, as a notebook's loop does (default: released)")
    ap.add_argument("--early", action="store_true",
                    help="the kill right after the first committed checkpoint (--script: the first step; it saves "
                         "none), the standbys in whatever state they are (raytf issue 53); by default once they are "
                         "ready, 12 s after the first step")
    a = ap.parse_args(argv)
    after_s, arms = 12.0, (0, 2)
    if a.smoke:
        # The run with standbys only: the run without is the same code (one() with standby_n=0), and a retry in
        # new processes runs in tests/ray/test_fault_tolerance.py (~45 s less of CI's second step, issue 31).
        a.rounds, a.steps, after_s, arms = 1, 120, 2.0, (2,)
    os.chdir(ROOT)
    import ray

    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    scratch = Path(tempfile.mkdtemp(prefix="raytf-recovery-"))
    rows = []
    try:
        for n in range(a.rounds):
            for standby_n in arms:
                row = one(scratch, n, standby_n, a.steps, after_s, a.script, a.early, release=not a.session)
                rows.append(row)
                print(f"round {n + 1}/{a.rounds} cluster.standby={standby_n}: " + " ".join(
                    f"{k}={v:.2f}" if isinstance(v, float) else f"{k}={v}" for k, v in row.items()), flush=True)
    finally:
        if a.session:
            import raytf

            raytf.release_standbys()
        ray.shutdown()
        shutil.rmtree(scratch, ignore_errors=True)
    # Recovery split at the program's start: before it, raytf's part (after the failed attempt's teardown: the new
    # placement and tasks, the handoff; for a training function also its strategy, which raytf builds), after it the
    # program's own (a script's strategy, and for both the model, the dataset, the trace and the first step).
    print("\n| cluster.standby | runs ok | tasks in standbys (retry) | detection s | recovery s (median) "
          "| of it to the program's start s | of it the program's s | wall s |")
    print("|---|---|---|---|---|---|---|---|")
    later = [(f"{n}, rounds 2+ of the session", n, 2) for n in arms if n and a.session and a.rounds > 1]
    for label, standby_n, first_round in [(str(n), n, 1) for n in arms] + later:
        of = [r for r in rows if r["standby"] == standby_n and r["round"] >= first_round]
        mine = [r for r in of if r["ok"]]

        def med(key, rows=mine):
            values = [r[key] for r in rows if r.get(key) is not None]
            return f"{statistics.median(values):.2f}" if values else "—"

        print(f"| {label} | {len(mine)}/{len(of)} | "
              f"{med('standby_tasks')} | {med('detect_s')} | {med('recovery_s')} | {med('to_program_s')} | "
              f"{med('program_s')} | {med('wall_s')} |")
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
