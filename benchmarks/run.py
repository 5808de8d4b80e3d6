"""raytf against the same TF program launched by hand and by Ray Train, side by side on this machine.

Run:  python -m benchmarks.run [--repeats 5] [--cold-repeats 3] [--workers 2] [--epochs 3] [--steps 50] [--batch 64]
      python -m benchmarks.run --smoke        (one short trial of each code path: the CI check that it runs;
                                               SMOKE_LEAVES_OUT says which contenders it leaves out and why)

Every contender runs benchmarks/workload.py's program (same model, data, per-replica batch, thread cap), and
the rounds are interleaved (A B C ... A B C ...) so the machine's drift hits all alike; the table shows medians
over rounds, and ratios taken within each round (then their median) to the hand-launched floor and to Ray Train.

Two phases. Cold: each launcher starts from a bare process, as a user's command does on one machine (the raytf
CLI with its embedded Ray, function and script mode, a Ray Train script that calls ray.init), so Ray's start and
stop count. Warm: one Ray instance, already running, serves every Ray-based contender, as a cluster does.
Hand-launched TF runs in both.

The cold rounds also print the cold-launch timeline (raytf issue 38): where each cold launch's seconds go, phase by
phase, beside the hand-launched program's own. raytf's phases come from its result.json (`timeline`: the driver's
marks, the tasks' TensorFlow import and strategy from their STARTED events); the first step, the end of training
and (by hand, in a script) the TensorFlow import from the workload's own marks (benchmarks/workload.py); the
process's spawn and exit from this benchmark's clock around the subprocess. What follows result.json's write (Ray's
stop, the interpreter's exit) is one row: "result.json -> exit". Then each cold CLI launch's wall split into Ray's
start, Ray's stop, the program's own time (the hand launch of the same round) and raytf's own share (raytf issue
53's target: ≤ 1 s), with and without standby processes (`cli_no_standby`: what they cost a run that never fails).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from importlib.metadata import version
from pathlib import Path

from raytf._core import timeline as tl

ROOT = Path(__file__).resolve().parents[1]
WORKLOAD = ROOT / "benchmarks" / "workload.py"
_TIMEOUT_S = 900  # one contender's run; beyond it, the row reports the timeout and the table goes on
# OMP_NUM_THREADS: Ray sets it to each actor's CPU count (1 here), and oneDNN's OpenMP pool follows it, not
# tf.config.threading; unset, each hand-launched process would start 2 OpenMP threads on 2 cores, and the
# floor would be ~5% slower per step than the same program under Ray for a reason that is not the launcher.
TF_ENV = {"TF_USE_LEGACY_KERAS": "1", "TF_CPP_MIN_LOG_LEVEL": "2", "BENCH_THREADS": "1", "OMP_NUM_THREADS": "1"}


@dataclass
class Trial:
    contender: str
    wall_s: float
    first_step_s: float | None = None
    step_ms: float | None = None  # median step, after the first epoch
    steady_ms: float | None = None  # (end of training - end of epoch 1) / steps: what callbacks and saves add
    examples_per_s: float | None = None
    peak_rss_mb: float | None = None
    raytf_ms: float | None = None  # per step, inside raytf's Keras callbacks (function mode), after epoch 1
    error: str | None = None
    phase: str = ""  # "cold" (each launcher starts from a bare process) or "warm" (one Ray already running)
    round: int = 0
    timeline: dict[str, float] | None = None  # cold: boundary -> seconds since the launcher spawned the process


@dataclass
class Setup:
    workers: int
    epochs: int
    steps: int
    batch: int
    scratch: Path
    trials: list[Trial] = field(default_factory=list)


def _measure(name: str, t0: float, wall: float, out: Path, examples_per_step: int) -> Trial:
    """A trial from the timing files the workload's processes wrote (rank 0 for times, all for memory)."""
    files = sorted(out.glob("timing-*.json"))
    if not files:
        return Trial(name, wall, error="no timing written")
    timings = [json.loads(f.read_text()) for f in files]
    r0 = min(timings, key=lambda t: t["rank"])
    spe = r0["steps_per_epoch"]
    steps = r0["step_s"][spe - 1:] or r0["step_s"]  # skip the first epoch (tracing, warm-up)
    step_ms = 1000 * statistics.median(steps)
    steady = r0.get("steady_s")
    steady_ms = 1000 * steady if steady else None
    per_step_s = (steady_ms or step_ms) / 1000
    in_loop = r0.get("raytf_s")
    return Trial(name, wall, first_step_s=r0["first_step_at"] - t0, step_ms=step_ms, steady_ms=steady_ms,
                 examples_per_s=examples_per_step / per_step_s, peak_rss_mb=max(t["peak_rss_mb"] for t in timings),
                 raytf_ms=None if in_loop is None else 1000 * in_loop)


def _free_port() -> int:
    # The seeds' way: pick a port, close it, hand it to TF (racy: tensorflow#21492; fine on an idle machine).
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def hand(s: Setup, out: Path) -> Trial:
    """N processes started by hand, each with its TF_CONFIG: the floor."""
    hosts = [f"127.0.0.1:{_free_port()}" for _ in range(s.workers)]
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    procs, logs = [], []
    for i in range(s.workers):
        env = {**os.environ, **TF_ENV, "TF_CONFIG": json.dumps({"cluster": {"worker": hosts},
                                                                "task": {"type": "worker", "index": i}})}
        logs.append(out / f"hand-worker{i}.stderr")
        with open(logs[-1], "wb") as err:  # a file, not a pipe: a chatty worker never blocks on it
            procs.append(subprocess.Popen(
                [sys.executable, str(WORKLOAD), "--out", str(out), "--epochs", str(s.epochs), "--steps",
                 str(s.steps), "--batch", str(s.batch)], env=env, stdout=subprocess.DEVNULL, stderr=err))
    # Until all are done, one fails (its peers would wait for it forever in a collective) or time runs out.
    deadline = t0 + _TIMEOUT_S
    while any(p.poll() is None for p in procs) and not any(p.returncode for p in procs) \
            and time.time() < deadline:
        time.sleep(0.2)  # polling N child processes for their exit, bounded by the deadline
    for p in procs:
        if p.poll() is None:
            p.kill()
        p.wait()
    wall = time.time() - t0
    failed = [(p, log) for p, log in zip(procs, logs) if p.returncode]
    if failed:
        p, log = failed[0]
        why = "timed out" if wall >= _TIMEOUT_S else f"exit {p.returncode}"
        return Trial("hand-launched TF", wall, error=f"{why}: {log.read_text(errors='replace')[-300:]}")
    trial = _measure("hand-launched TF", t0, wall, out, s.batch * s.workers)
    trial.timeline = cold_timeline(t0, wall, _timings(out), None, by_hand=True)
    return trial


def _raytf(name: str, s: Setup, out: Path, conf: str, overrides: list[str], examples_per_step: int) -> Trial:
    import raytf

    cfg = raytf.load_config(ROOT / conf, [
        f"storage.path={s.scratch / 'runs'}", f"run.name=bench-{out.name}", f"train.epochs={s.epochs}",
        f"train.steps_per_epoch={s.steps}", f"train.batch_size={s.batch}", f"cluster.num_workers={s.workers}",
        "checkpoint.resume=false", *overrides])
    t0 = time.time()
    try:
        result = raytf.fit(cfg, quiet=True, raise_on_failure=False)
    except raytf.RaytfError as e:  # a benchmark row, not a crash of the whole table
        return Trial(name, time.time() - t0, error=f"{type(e).__name__}: {e}"[:300])
    wall = time.time() - t0
    _settle()
    if result.status != "succeeded":
        return Trial(name, wall, error=str(result.error)[:300])
    return _measure(name, t0, wall, out, examples_per_step)


def _settle(timeout_s: float = 60.0) -> None:
    """Outside the timed run: until the standbys the run asked for as it ended have imported TensorFlow, as they
    have by the time a notebook's next cell runs; else their import would land on the next contender's run."""
    import ray

    from raytf._driver import standby

    p = standby.pool(create=False)
    refs = p.warming() if p is not None else []
    if refs:
        ray.wait(refs, num_returns=len(refs), timeout=timeout_s)


_LEAN = ["checkpoint.every_epochs=0", "checkpoint.export_model=false", "metrics.every_steps=0"]


def raytf_script(s: Setup, out: Path) -> Trial:
    """The very same script, launched by raytf (train.script)."""
    args = f"[--out,{out},--epochs,'{s.epochs}',--steps,'{s.steps}',--batch,'{s.batch}']"
    return _raytf(SCRIPT, s, out, "conf/local.yaml",
                  ["train.entrypoint=", f"train.script={WORKLOAD}", f"train.args={args}", "train.stream_output=none",
                   *_LEAN],
                  s.batch * s.workers)


def raytf_function(s: Setup, out: Path) -> Trial:
    return _raytf("raytf MWMS, function", s, out, "conf/local.yaml",
                  ["train.entrypoint=benchmarks.workload:train", f"train.params.out={out}", *_LEAN],
                  s.batch * s.workers)


def raytf_function_fresh(s: Setup, out: Path) -> Trial:
    """The lean function with cluster.standby=0: every run's tasks start in new processes that import TensorFlow
    (before raytf issue 22, every run; `function` in later rounds starts in the standbys the one before left)."""
    return _raytf(FRESH, s, out, "conf/local.yaml",
                  ["train.entrypoint=benchmarks.workload:train", f"train.params.out={out}", *_LEAN,
                   "cluster.standby=0"],
                  s.batch * s.workers)


def raytf_function_observed(s: Setup, out: Path) -> Trial:
    """Checkpoint every epoch (uploaded, committed) and step metrics every 10 steps from every rank."""
    return _raytf("raytf MWMS, function + ckpt/metrics", s, out, "conf/local.yaml",
                  ["train.entrypoint=benchmarks.workload:train", f"train.params.out={out}",
                   "checkpoint.every_epochs=1", "checkpoint.export_model=false", "metrics.every_steps=10"],
                  s.batch * s.workers)


def raytf_function_unsplit(s: Setup, out: Path) -> Trial:
    """The observed run with metrics.breakdown=false: TF's get_next and all-reduce left as they are (no timestamps
    in the step's graph, no totals read at each row): what the step-time breakdown costs, paired by round."""
    return _raytf(UNSPLIT, s, out, "conf/local.yaml",
                  ["train.entrypoint=benchmarks.workload:train", f"train.params.out={out}",
                   "checkpoint.every_epochs=1", "checkpoint.export_model=false", "metrics.every_steps=10",
                   "metrics.breakdown=false"],
                  s.batch * s.workers)


def raytf_ps(s: Setup, out: Path) -> Trial:
    """ParameterServerStrategy, same number of workers (+ chief and 1 ps); a step is one batch on one worker."""
    share = 2 / (s.workers + 2)  # chief + workers + ps on this machine's 2 CPUs
    return _raytf("raytf PS (chief + workers + 1 ps)", s, out, "conf/ps_local.yaml",
                  ["train.entrypoint=benchmarks.workload:train", f"train.params.out={out}", *_LEAN,
                   f"cluster.chief.cpus={share}", f"cluster.worker.cpus={share}", f"cluster.ps.cpus={share}"],
                  s.batch)


def _ray_train_fit(out, scratch, workers, epochs, steps, batch) -> None:
    """Ray Train's TensorflowTrainer; tf-keras through its workers' runtime_env (its own os.environ fix comes
    after TensorFlow is imported, too late)."""
    from ray.train import RunConfig, ScalingConfig
    from ray.train.tensorflow import TensorflowTrainer

    from benchmarks.workload import ray_train_loop

    trainer = TensorflowTrainer(
        ray_train_loop, train_loop_config={"out": str(out), "epochs": int(epochs), "steps": int(steps),
                                           "batch": int(batch)},
        scaling_config=ScalingConfig(num_workers=int(workers), resources_per_worker={"CPU": 1}),
        run_config=RunConfig(name=f"bench-{Path(out).name}", storage_path=str(Path(scratch) / "ray-train"),
                             worker_runtime_env={"env_vars": dict(TF_ENV)}))
    trainer.fit()


def ray_train(s: Setup, out: Path) -> Trial:
    t0 = time.time()
    try:
        _ray_train_fit(out, s.scratch, s.workers, s.epochs, s.steps, s.batch)
    except Exception as e:  # a benchmark row, not a crash of the whole table
        return Trial("Ray Train TensorflowTrainer", time.time() - t0, error=f"{type(e).__name__}: {e}"[:300])
    return _measure("Ray Train TensorflowTrainer", t0, time.time() - t0, out, s.batch * s.workers)


def _lean_function(s: Setup, out: Path) -> list[str]:
    return [f"storage.path={s.scratch / 'runs'}", f"run.name=bench-{out.name}", f"train.epochs={s.epochs}",
            f"train.steps_per_epoch={s.steps}", f"train.batch_size={s.batch}", f"cluster.num_workers={s.workers}",
            "checkpoint.resume=false", "train.entrypoint=benchmarks.workload:train", f"train.params.out={out}",
            *_LEAN]


def _child(name: str, cmd: list[str], s: Setup, out: Path) -> Trial:
    t0 = time.time()
    try:
        proc = subprocess.run(cmd, cwd=ROOT, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}, capture_output=True,
                              text=True, timeout=_TIMEOUT_S)
    except subprocess.TimeoutExpired:  # run() has killed it
        return Trial(name, time.time() - t0, error=f"timed out after {_TIMEOUT_S} s")
    wall = time.time() - t0
    if proc.returncode:
        return Trial(name, wall, error=f"exit {proc.returncode}: {(proc.stderr or proc.stdout)[-300:]}")
    trial = _measure(name, t0, wall, out, s.batch * s.workers)
    result = s.scratch / "runs" / f"bench-{out.name}" / "result.json"
    summary = json.loads(result.read_text()) if result.exists() else {}
    trial.timeline = cold_timeline(t0, wall, _timings(out), summary.get("timeline"))
    return trial


def raytf_cli_cold(s: Setup, out: Path) -> Trial:
    """The user's command on one machine: `python -m raytf.launch conf/local.yaml ...`, which starts (and stops)
    its own embedded Ray: Python start-up, ray.init and ray.shutdown included."""
    return _child(CLI_FUNCTION,
                  [sys.executable, "-m", "raytf.launch", "conf/local.yaml", "--quiet", *_lean_function(s, out)], s, out)


def raytf_cli_no_standby_cold(s: Setup, out: Path) -> Trial:
    """The cold CLI without standby processes (cluster.standby=0): what the standbys, asked for at the first step for
    a retry's sake, cost a run that never fails (their Ray workers' start, their TensorFlow import at nice 19)."""
    return _child(CLI_NO_STANDBY, [sys.executable, "-m", "raytf.launch", "conf/local.yaml", "--quiet",
                                   *_lean_function(s, out), "cluster.standby=0"], s, out)


def raytf_cli_script_cold(s: Setup, out: Path) -> Trial:
    """The same command running the workload as a script (train.script): the program launched by hand, unchanged."""
    args = f"[--out,{out},--epochs,'{s.epochs}',--steps,'{s.steps}',--batch,'{s.batch}']"
    overrides = [o for o in _lean_function(s, out) if not o.startswith(("train.entrypoint=", "train.params."))]
    return _child(CLI_SCRIPT,
                  [sys.executable, "-m", "raytf.launch", "conf/local.yaml", "--quiet", *overrides, "train.entrypoint=",
                   f"train.script={WORKLOAD}", f"train.args={args}", "train.stream_output=none"], s, out)


def _timings(out: Path) -> list[dict]:
    return [json.loads(f.read_text()) for f in sorted(out.glob("timing-*.json"))]


# The cold-launch timeline's rows: each boundary a launch passes, in order (raytf's from _core.timeline), then the
# process's exit. A hand-launched program passes only the task's boundaries.
EXIT = "exit"
TIMELINE_ROWS = {
    tl.PROCESS_START: "process started (spawn → OS start)",
    tl.IMPORTS_DONE: "CLI imported (Python, raytf.launch)",
    tl.CONFIG_CHECKED: "config loaded, checked",
    tl.DRIVER_IMPORTED: "driver imported (Ray, ...)",
    tl.RAY_READY: "Ray started",
    tl.DRIVER_READY: "driver made (raytf.fit's imports)",
    tl.CODE_CHECKED: "code shipped/checked",
    tl.PLACEMENT_READY: "placement group ready",
    tl.ACTORS_STARTED: "task actors created",
    tl.TASKS_ADDRESSED: "all tasks addressed",
    tl.TASKS_LAUNCHED: "training calls sent",
    tl.TASK_TF_IMPORT_START: "task: TF import begun (last task)",
    tl.TASK_TF_IMPORTED: "task: TF imported (last task)",
    tl.TASK_STRATEGY_READY: "task: strategy built (last task)",
    tl.FIRST_STEP: "first step done (rank 0)",
    tl.LAST_STEP: "training ended (last task's Model.fit)",
    tl.TRAINING_END_SEEN: "driver saw the end",
    tl.TEARDOWN_DONE: "actors, placement group released",
    tl.CURVES_WRITTEN: "learning curves written",
    tl.METRICS_WRITTEN: "metrics.parquet written",
    tl.RESULT_WRITTEN: "result.json write begun",
    EXIT: "process exited (Ray stopped, interpreter exit)",
}


def cold_timeline(t0: float, wall: float, timings: list[dict], raytf: dict | None, *,
                  by_hand: bool = False) -> dict[str, float]:
    """Boundary -> seconds since the launcher spawned the process (t0), for one cold trial: raytf's `timeline` from
    result.json (None: not raytf), the workload's own marks (`timings`, one per rank) and the exit (`wall`); the
    process's start is raytf's driver's, or (`by_hand`) the workload's own (a Ray Train driver's is not known).
    The task's boundaries are the last rank's (the slowest gates the first step); the first step is rank 0's."""
    out: dict[str, float] = {}
    marks = [t.get("marks") or {} for t in timings]

    def last(key: str) -> float | None:
        values = [m[key] for m in marks if m.get(key) is not None]
        return max(values) - t0 if values else None

    for key, phase in tl.TASK_MARKS.items():  # by hand, a script, Ray Train: the program's own
        if (at := last(key)) is not None:
            out[phase] = at
    if (at := last("train_end")) is not None:
        out[tl.LAST_STEP] = at
    first = [t["first_step_at"] for t in timings if t.get("first_step_at")]
    if first:
        out[tl.FIRST_STEP] = min(timings, key=lambda t: t["rank"])["first_step_at"] - t0
    if by_hand:  # the process is the task's
        started = [m["process_start"] for m in marks if m.get("process_start")]
        if started:
            out[tl.PROCESS_START] = max(started) - t0
    elif raytf is not None:
        origin = raytf["process_started_at"]
        for phase, at in raytf["phases"].items():
            # The workload's own first step and end: with metrics.every_steps=0 raytf's first event is an epoch's.
            if phase not in (tl.FIRST_STEP, tl.LAST_STEP):
                out[phase] = origin + at - t0
    out[EXIT] = wall
    return out


def timeline_table(trials: list[Trial]) -> str:
    """The cold-launch timeline (raytf issue 38): for each contender, each boundary's median time since the spawn,
    and (+) the median seconds from the boundary before it (the phase that ends there); "" without cold trials."""
    ok = [t for t in trials if t.phase == "cold" and t.error is None and t.timeline]
    names = list(dict.fromkeys(t.contender for t in ok))
    if not names:
        return ""
    order = list(TIMELINE_ROWS)
    cells: dict[str, dict[str, str]] = {}
    for n in names:
        runs = [t.timeline for t in ok if t.contender == n]
        took: dict[str, list[float]] = {}
        for tline in runs:
            prev = 0.0  # the spawn
            for phase in order:
                if phase in tline:
                    took.setdefault(phase, []).append(tline[phase] - prev)
                    prev = tline[phase]
        cells[n] = {p: f"{statistics.median([r[p] for r in runs if p in r]):.2f} (+{statistics.median(d):.2f})"
                    for p, d in took.items()}
    rows = ["| cold-launch timeline: boundary passed (s since spawn, (+s) since the row before) | "
            + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
    for p in order:
        if any(p in cells[n] for n in names):
            rows.append(f"| {TIMELINE_ROWS[p]} | " + " | ".join(cells[n].get(p, "—") for n in names) + " |")
    return "\n".join(rows)


def cold_share(tline: dict[str, float], wall: float, hand_wall: float) -> dict[str, float]:
    """One cold CLI launch's wall split the way raytf issue 53 asks: Ray's start (its `ray.init`, the timeline's
    `Ray started` phase), Ray's stop (from result.json's last write to the process's exit: the CLI's
    `standby.release()`, `ray.shutdown` and the interpreter's exit), the program's own time (the same program
    launched by hand, the same round: its whole wall) and what is left, raytf's own share (its imports, the driver,
    the placement, the tasks' start and addressing, the teardown, the curves and files; less the hand launch's own
    exit, which raytf's killed tasks do not pay)."""
    ray_start = tline[tl.RAY_READY] - tline[tl.DRIVER_IMPORTED]
    ray_stop = wall - tline[tl.RESULT_WRITTEN]
    return {"wall": wall, "ray_start": ray_start, "ray_stop": ray_stop, "program": hand_wall,
            "raytf": wall - ray_start - ray_stop - hand_wall}


def share_table(trials: list[Trial]) -> str:
    """The cold CLI launches' walls split into Ray's start and stop, the program's own time and raytf's share
    (`cold_share`), each round's raytf trial paired with the same round's hand launch; medians (and each round).
    "" without cold raytf trials and a hand launch beside them."""
    ok = [t for t in trials if t.phase == "cold" and t.error is None]
    hand_by_round = {t.round: t.wall_s for t in ok if t.contender == HAND}
    rows = ["| cold CLI launch (s, median of rounds: each round) | wall | Ray's start | Ray's stop | the program "
            "by hand | raytf's own share |", "|---|---|---|---|---|---|"]
    verdicts: list[str] = []
    for name in (CLI_FUNCTION, CLI_NO_STANDBY, CLI_SCRIPT):
        shares = [cold_share(t.timeline, t.wall_s, hand_by_round[t.round]) for t in ok
                  if t.contender == name and t.timeline and t.round in hand_by_round
                  and tl.RAY_READY in t.timeline and tl.RESULT_WRITTEN in t.timeline]
        if not shares:
            continue
        cells = [f"{statistics.median(s[k] for s in shares):.2f} ({', '.join(f'{s[k]:.2f}' for s in shares)})"
                 for k in ("wall", "ray_start", "ray_stop", "program", "raytf")]
        rows.append(f"| {name} | " + " | ".join(cells) + " |")
        own = statistics.median(s["raytf"] for s in shares)
        verdicts.append(f"- raytf's own share of a cold launch, {name}: {own:.2f} s (target ≤ 1 s) — "
                           f"{'met' if own <= 1.0 else 'MISSED'}")
    return "\n".join(rows) + "\n\n" + "\n".join(verdicts) if len(rows) > 2 else ""


def ray_train_cold(s: Setup, out: Path) -> Trial:
    """A Ray Train script run the same way: a fresh Python that starts its own local Ray."""
    code = ("import sys, ray; from benchmarks.run import _ray_train_fit; "
            "ray.init(address='local', num_cpus=2, include_dashboard=False, log_to_driver=False); "
            "_ray_train_fit(*sys.argv[1:]); ray.shutdown()")
    return _child("Ray Train TensorflowTrainer (cold)",
                  [sys.executable, "-c", code, str(out), str(s.scratch), str(s.workers), str(s.epochs), str(s.steps),
                   str(s.batch)], s, out)


COLD = {"hand": hand, "cli": raytf_cli_cold, "cli_no_standby": raytf_cli_no_standby_cold,
        "cli_script": raytf_cli_script_cold, "raytrain_cold": ray_train_cold}
CONTENDERS = {"hand": hand, "script": raytf_script, "function": raytf_function, "fresh": raytf_function_fresh,
              "observed": raytf_function_observed, "unsplit": raytf_function_unsplit, "raytrain": ray_train,
              "ps": raytf_ps}


# The smoke (CI's check that every code path here runs; issue 31: each run left out is ~10-40 s of CI's second
# step) leaves out the contenders whose code another one runs: Ray Train's cold run is the warm run's
# _ray_train_fit in the _child the CLI's cold runs use; `fresh` and `unsplit` are `function` and `observed` with
# one override (cluster.standby=0, metrics.breakdown=false), paths the default tests run, and so is
# `cli_no_standby` of `cli`. The hand launch runs once, cold (the warm rounds' ratios to it read "—"). `--only`
# still runs any of them.
SMOKE_LEAVES_OUT = {"raytrain_cold", "fresh", "unsplit", "cli_no_standby"}


def _median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def _fmt(v, spec: str = ".1f") -> str:
    return "—" if v is None else format(v, spec)


def _paired(trials: list[Trial], name: str, base: str, key: str):
    """Median over rounds of (name's value ÷ base's value in the same phase and round): each ratio compares two
    runs minutes apart, so the machine's slow drift cancels; None without a pair."""
    by = {(t.phase, t.round): t for t in trials if t.contender == base and t.error is None}
    ratios = []
    for t in trials:
        b = by.get((t.phase, t.round))
        if t.contender == name and t.error is None and b is not None and getattr(t, key) and getattr(b, key):
            ratios.append(getattr(t, key) / getattr(b, key))
    return statistics.median(ratios) if ratios else None


HAND, FUNCTION, SCRIPT = "hand-launched TF", "raytf MWMS, function", "raytf MWMS, train.script"
OBSERVED = "raytf MWMS, function + ckpt/metrics"
FRESH = "raytf MWMS, function, cluster.standby=0"
UNSPLIT = "raytf MWMS, function + ckpt/metrics, metrics.breakdown=false"
RAY_TRAIN, RAY_TRAIN_COLD = "Ray Train TensorflowTrainer", "Ray Train TensorflowTrainer (cold)"
CLI_FUNCTION, CLI_SCRIPT = "raytf CLI, embedded Ray (cold)", "raytf CLI, train.script, embedded Ray (cold)"
CLI_NO_STANDBY = "raytf CLI, embedded Ray (cold), cluster.standby=0"


def table(trials: list[Trial]) -> tuple[str, dict[str, dict]]:
    """The markdown table of medians per contender, with ratios to hand-launched TF (paired by round) and to
    Ray Train (the warm one for warm rows, the cold one for cold rows)."""
    names = list(dict.fromkeys(t.contender for t in trials))
    med: dict[str, dict] = {}
    for n in names:
        ok = [t for t in trials if t.contender == n and t.error is None]
        med[n] = {k: _median([getattr(t, k) for t in ok]) for k in
                  ("first_step_s", "step_ms", "steady_ms", "examples_per_s", "wall_s", "peak_rss_mb", "raytf_ms")}
        med[n]["runs"] = f"{len(ok)}/{sum(t.contender == n for t in trials)}"
        med[n]["phase"] = next((t.phase for t in ok), "")
        med[n]["step_vs_hand"] = _paired(trials, n, HAND, "step_ms")
        med[n]["wall_vs_hand"] = _paired(trials, n, HAND, "wall_s")
        rt = RAY_TRAIN_COLD if med[n]["phase"] == "cold" else RAY_TRAIN
        med[n]["wall_vs_ray_train"] = _paired(trials, n, rt, "wall_s")
        med[n]["steady_vs_function"] = _paired(trials, n, FUNCTION, "steady_ms")
        med[n]["step_vs_unsplit"] = _paired(trials, n, UNSPLIT, "step_ms")
        med[n]["steady_vs_unsplit"] = _paired(trials, n, UNSPLIT, "steady_ms")

    rows = ["| contender | Ray | first step s | step ms (median) | step ms (steady mean) | examples/s | wall s | "
            "peak RSS MB/process | raytf in-loop ms/step | step ÷ hand | wall ÷ hand | wall ÷ Ray Train | runs ok |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for n in names:
        m = med[n]
        ray_col = {"cold": "own, started+stopped", "warm": "running"}.get(m["phase"], "")
        if n == HAND:
            ray_col = "none"
        rows.append(f"| {n} | {ray_col} | {_fmt(m['first_step_s'])} | {_fmt(m['step_ms'], '.2f')} | "
                    f"{_fmt(m['steady_ms'], '.2f')} | {_fmt(m['examples_per_s'], '.0f')} | {_fmt(m['wall_s'])} | "
                    f"{_fmt(m['peak_rss_mb'], '.0f')} | {_fmt(m['raytf_ms'], '.3f')} | "
                    f"{_fmt(m['step_vs_hand'], '.3f')} | "
                    f"{_fmt(m['wall_vs_hand'], '.2f')} | {_fmt(m['wall_vs_ray_train'], '.2f')} | {m['runs']} |")
    return "\n".join(rows), med


def targets(med: dict[str, dict]) -> list[str]:
    """The issue's targets, each as met or missed with the numbers (paired ratios)."""
    lines = []

    def check(label, value, limit):
        if value is not None:
            lines.append(f"- {label}: {value:.3f} (target ≤ {limit}) — {'met' if value <= limit else 'MISSED'}")

    fn, cli = med.get(FUNCTION, {}), med.get(CLI_FUNCTION, {})
    obs = med.get(OBSERVED, {})
    check("raytf step time ÷ hand-launched (warm)", fn.get("step_vs_hand"), 1.03)
    check("raytf wall time ÷ hand-launched, Ray already running", fn.get("wall_vs_hand"), 1.2)
    check("a repeat run (tasks in the standbys the run before left) wall time ÷ hand-launched", fn.get("wall_vs_hand"),
          0.8)
    check("the same, the program as a script (train.script: its child in the standbys the run before left)",
          med.get(SCRIPT, {}).get("wall_vs_hand"), 0.8)
    check("raytf wall time ÷ hand-launched, Ray already running, no standbys", med.get(FRESH, {}).get("wall_vs_hand"),
          1.2)
    check("raytf wall time ÷ hand-launched, CLI starting its own Ray", cli.get("wall_vs_hand"), 1.5)
    check("the same, the program as a script (train.script)", med.get(CLI_SCRIPT, {}).get("wall_vs_hand"), 1.5)
    check("raytf wall time ÷ Ray Train, Ray already running", fn.get("wall_vs_ray_train"), 0.4)
    check("raytf wall time ÷ Ray Train, each starting its own Ray", cli.get("wall_vs_ray_train"), 0.4)
    check("checkpoint every epoch + metrics every 10 steps, steady step time ÷ without (end to end, paired)",
          obs.get("steady_vs_function"), 1.05)
    check("the step-time breakdown (metrics.breakdown), median step ÷ without it (paired)", obs.get("step_vs_unsplit"),
          1.01)
    check("the same, steady step (metrics rows and checkpoints included) ÷ without it (paired)",
          obs.get("steady_vs_unsplit"), 1.01)
    if obs.get("raytf_ms") is not None and obs.get("steady_ms"):
        # Measured inside the run, so the machine's drift between runs does not enter.
        check("the same, from the time spent inside raytf's callbacks: steady ÷ (steady - in-loop)",
              obs["steady_ms"] / (obs["steady_ms"] - obs["raytf_ms"]), 1.05)
    return lines


def _rounds(phase: str, chosen: list[str], contenders: dict, setup: Setup, repeats: int) -> None:
    for r in range(repeats):
        for c in chosen:
            out = setup.scratch / f"{phase}-{c}-{r}"
            trial = contenders[c](setup, out)
            trial.phase, trial.round = phase, r
            setup.trials.append(trial)
            print(f"{phase} round {r + 1}/{repeats} {trial.contender}: wall {trial.wall_s:.1f}s "
                  f"step {_fmt(trial.step_ms, '.2f')}ms" + (f" ERROR {trial.error}" if trial.error else ""),
                  flush=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.run", description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5, help="interleaved rounds with Ray running")
    ap.add_argument("--cold-repeats", type=int, default=3, help="interleaved rounds of the cold launches")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--steps", type=int, default=50, help="per epoch")
    ap.add_argument("--batch", type=int, default=64, help="per replica (global = batch x workers)")
    every = [*COLD, *(c for c in CONTENDERS if c not in COLD)]
    ap.add_argument("--only", default=None, help=f"comma-separated, of {','.join(every)} (default: all)")
    ap.add_argument("--smoke", action="store_true",
                    help="one short trial of each code path (SMOKE_LEAVES_OUT only if --only names them): checks it "
                         "runs")
    ap.add_argument("--json", help="also write every trial here")
    a = ap.parse_args(argv)
    if a.only is None:
        a.only = ",".join(c for c in every if not (a.smoke and c in SMOKE_LEAVES_OUT))
    if a.smoke:
        a.repeats, a.cold_repeats, a.epochs, a.steps = 1, 1, 2, 5
    chosen = [c.strip() for c in a.only.split(",") if c.strip()]
    unknown = set(chosen) - set(every)
    if unknown:
        ap.error(f"--only: unknown contender(s) {sorted(unknown)}; choose from {','.join(every)}")
    os.chdir(ROOT)  # raytf's tasks import benchmarks.workload from the driver's working directory
    scratch = Path(tempfile.mkdtemp(prefix="raytf-bench-"))
    setup = Setup(a.workers, a.epochs, a.steps, a.batch, scratch)
    ray_start = None
    try:
        # Cold first, before this process starts its Ray: each cold launcher starts and stops its own.
        cold = [c for c in chosen if c in COLD and (c != "hand" or any(x in chosen for x in COLD if x != "hand"))]
        if any(c != "hand" for c in cold):
            _rounds("cold", cold, COLD, setup, a.cold_repeats)
        warm = [c for c in chosen if c in CONTENDERS and not (a.smoke and c == "hand" and "hand" in cold)]
        if any(c != "hand" for c in warm) or not cold:
            import ray

            t = time.perf_counter()
            ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False,
                     configure_logging=False)
            ray_start = time.perf_counter() - t
            try:
                _rounds("warm", warm, CONTENDERS, setup, a.repeats)
            finally:
                ray.shutdown()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    md, med = table(setup.trials)
    import ray

    phases = {t.phase for t in setup.trials}
    rounds = " + ".join(f"{n} {p}" for p, n in (("cold", a.cold_repeats), ("warm", a.repeats)) if p in phases)

    print(f"\n{a.workers} workers, per-replica batch {a.batch} (global {a.batch * a.workers}), {a.epochs} epochs x "
          f"{a.steps} steps; {rounds} interleaved rounds; {os.cpu_count()} CPUs, "
          f"Python {platform.python_version()}, TF {version('tensorflow')}, Ray {ray.__version__}"
          + (f"; the warm rounds' ray.init: {ray_start:.1f}s" if ray_start is not None else "") + "\n")
    print(md)
    if timeline := timeline_table(setup.trials):
        print("\n" + timeline)
    if shares := share_table(setup.trials):
        print("\n" + shares)
    print("\n" + "\n".join(targets(med)))
    if a.json:
        Path(a.json).write_text(json.dumps([t.__dict__ for t in setup.trials], indent=1))
    failed = [t for t in setup.trials if t.error]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
