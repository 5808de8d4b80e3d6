"""How raytf's cost grows with the number of ranks (issue 38), in two parts, each side by side in one run.

**Orchestration** (`--tasks 8,32,128`): raytf's own TaskGroup (`_driver/group.py`: the placement group, one task
actor per rank, each task's address, held port, storage and code checks, the TF cluster spec and every rank's
TF_CONFIG) on a simulated cluster (`ray.cluster_utils.Cluster`: a head and nodes of 16 CPUs on this machine), the
tasks never importing TensorFlow (the group is torn down before any training call): launch -> all addressed, and
teardown; against Ray itself starting the same number of bare actors in the same placement group shape and
getting an answer from each. Plus the driver's CPU seconds and RSS, and the CPU seconds one process had used when it
answered (medians: a bare actor's, a raytf task's; on one machine a task's start is CPU, and these do not scatter
with the shared cores' wall clock as the totals do). Target: raytf's all-addressed for 128 tasks under 10 s beyond
Ray's own, taken round by round (`--rounds`, the two sides' order alternating: whichever goes second may start on
nodes still reaping the first one's processes) and the median of the rounds given.

**Intake** (`--ranks 8,32,128,512`): N ranks each
report one metrics row every `--interval` seconds, through raytf's own task-side emitter (`_task.call.Emitter`,
one per rank as each task has: a row goes at once while the rank's last push has landed, else with the rows that
wait for it, in one push) into raytf's own event bus (an
`EventBuffer` actor, `max_concurrency` as a run sizes it, on the driver's node), drained by a loop that does
what the driver's does with each row: the metrics table (`MetricsTable.add`), the straggler watch
(`Stragglers.add`), the TensorBoard files (`TensorBoardSink`: one per rank), and a Parquet part every
`metrics.flush_interval_s` (`RunDir.metrics.append`, local
storage). Then the run's end on that table: `metrics.parquet` compacted, the learning curves plotted; and, the
run's `config.yaml` and `result.json` written beside it as its driver writes them (N tasks, one attempt, the
stragglers found, the final metrics), what a user runs to look at it afterwards, each a fresh process as from a
shell: `python -m raytf.runs show`, `... plot` (the learning curves) and `... plot --ranks` (each rank's step time).

**Real training** (`--train 2,4,8,16`): the benchmark's tiny CNN (benchmarks/workload.py) under
MultiWorkerMirroredStrategy with N workers on this machine, one TF thread each, the cores shared by all: raytf (the
function, `cluster.standby=0` so that every run's tasks import TensorFlow as a hand-launched process does, on one
Ray started for the part) against the same program hand-launched with its TF_CONFIG (`benchmarks.run`'s `hand`),
up to `--hand-max` workers; launch to the first step and the median step after the first epoch, side by side.

Run:  python -m benchmarks.scale [--tasks 8,32,128] [--rounds 3] [--ranks 8,32,128,512] [--train 2,4,8,16]
                                 [--seconds 20] [--interval 0.1] [--plot benchmarks/scale.png] [--json FILE]
      python -m benchmarks.scale --smoke      (8 tasks; 8 ranks for 3 s; 2 workers through raytf: that it runs)

No TensorFlow: `--reporters` Ray processes each speak for N/reporters ranks (a real task speaks for one; the
bus cannot tell). Per size: rows per second offered and taken into the table, rows the bus coalesced (a rank's
step rows past its bound: raytf's back-pressure), lag from the report to the driver's table and to a Parquet
part (p50 / p99), the CPU share of the driver loop, the bus and the reporters, and what one report costs the
reporting process (p50 / p99). Targets (issue 38): 512 ranks every 100 ms with the driver under one core and
under 2 s lag to the driver; the run's end (compaction and curves) of that table, and `runs show` and the curves
from `runs plot` of it, each under 5 s.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import ray

from benchmarks import loglog
from benchmarks.rounds import interleaved, medians, paired
from raytf._core import events as ev
from raytf._core.metrics import MetricsTable
from raytf._core.stragglers import Stragglers
from raytf._driver.figures import learning_curves, png_bytes
from raytf._driver.sinks import TensorBoardSink
from raytf._storage import RunDir

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NODE_CPUS = 16  # each simulated node's

FLUSH_INTERVAL_S = 5.0  # metrics.flush_interval_s's default
POLL_S = 0.5  # the driver's drain wait (_driver.driver.Driver.poll_s)


@ray.remote(num_cpus=0)
class Reporters:
    """Speaks for `ranks`: one Emitter each, as each task's call has, reporting at a fixed rate."""

    def __init__(self, bus, ranks: list[int]) -> None:
        from raytf._task.call import Emitter

        self.emitters = [Emitter(bus, "worker", r, 1) for r in ranks]

    def pid(self) -> int:
        return os.getpid()

    def run(self, seconds: float, interval: float) -> dict:
        costs: list[float] = []
        step, late = 0, 0
        start = time.monotonic()
        while step * interval < seconds:
            step += 1
            for emit in self.emitters:
                t = time.perf_counter()
                emit(ev.STEP, {"epoch": 1, "step": step, "metrics": {
                    "loss": 1.0 / step, "step_time_s": interval, "input_wait_s": 0.01, "compute_s": interval - 0.01}})
                costs.append(time.perf_counter() - t)
            # The ranks' step clock: the next tick is due `interval` after this one, however long the reports took
            # (a reporter that cannot keep up is late, and that is counted, not hidden).
            due = start + step * interval
            if time.monotonic() > due + interval:
                late += 1
            time.sleep(max(0.0, due - time.monotonic()))
        for emit in self.emitters:
            emit.flush()
        costs.sort()
        return {"rows": step * len(self.emitters), "late_ticks": late, "ticks": step,
                "dropped_here": sum(e.dropped for e in self.emitters),
                "pushes": sum(e._outbox.pushes for e in self.emitters),  # (the emitter's outbox: its pushes)
                "cost_p50_us": 1e6 * costs[len(costs) // 2], "cost_p99_us": 1e6 * costs[int(len(costs) * 0.99)]}


def _cpu(pid: int) -> float:
    import psutil

    t = psutil.Process(pid).cpu_times()
    return t.user + t.system


def _own_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(len(values) * q))]


def measure(n: int, seconds: float, interval: float, reporters: int, scratch: str) -> dict:
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    from raytf._driver.group import _RemoteBus

    bus = _RemoteBus.options(max_concurrency=2 * n + 8, scheduling_strategy=NodeAffinitySchedulingStrategy(
        ray.get_runtime_context().get_node_id(), soft=False)).remote()
    bus_pid = ray.get(bus.__ray_call__.remote(lambda self: os.getpid()))
    k = min(reporters, n)
    groups = [Reporters.remote(bus, list(range(i, n, k))) for i in range(k)]
    pids = ray.get([g.pid.remote() for g in groups])
    rd = RunDir(scratch, f"scale-{n}")
    rd.makedirs()
    table = MetricsTable(f"scale-{n}")
    stragglers = Stragglers(1.3, 5)
    tensorboard = TensorBoardSink(rd)  # a file per rank, as a run's driver writes them
    intake_lag: list[float] = []
    parquet_lag: list[float] = []
    unflushed: list[float] = []
    taken = parts = 0
    loop_cpu = 0.0

    def take(events: list[ev.Event]) -> None:
        nonlocal taken
        now = time.time()
        for e in events:
            if e.kind == ev.DROPPED:
                dropped_now[e.rank] = e.payload.get("steps", 0)  # the rank's count since the start
                continue
            table.add(e)
            stragglers.add(attempt=e.attempt, rank=e.rank, role=e.role, host="", step=int(e.payload["step"]),
                           metrics=e.payload["metrics"])
            tensorboard(e)
            intake_lag.append(now - e.time)
            unflushed.append(e.time)
            taken += 1

    def flush() -> None:
        nonlocal parts
        parts += 1
        rd.metrics.append(table.take_new(), f"scale-{parts:06d}")
        now = time.time()
        parquet_lag.extend(now - t for t in unflushed)
        unflushed.clear()

    dropped_now: dict[int, int] = {}
    cpu0 = {p: _cpu(p) for p in [bus_pid, *pids]}
    wall0 = time.monotonic()
    runs = [g.run.remote(seconds, interval) for g in groups]
    drain = bus.drain.remote(POLL_S)
    last_flush = time.monotonic()
    pending = list(runs)
    while True:
        ready, _ = ray.wait([*pending, drain], num_returns=1, timeout=POLL_S * 4)
        t = _own_cpu()
        if drain in ready:
            events = ray.get(drain)
            drain = bus.drain.remote(POLL_S)
            take(events)
        pending = [r for r in pending if r not in ready]
        if table.dirty and time.monotonic() - last_flush >= FLUSH_INTERVAL_S:
            flush()
            last_flush = time.monotonic()
        loop_cpu += _own_cpu() - t
        if not pending:
            break
    wall = time.monotonic() - wall0
    t = _own_cpu()
    take(ray.get(drain) + ray.get(bus.drain.remote(0)))  # what the reporters' last pushes left on the bus
    if table.dirty:
        flush()
    loop_cpu += _own_cpu() - t
    cpu1 = {p: _cpu(p) for p in cpu0}
    sent = ray.get(runs)
    offered = sum(s["rows"] for s in sent)
    coalesced = sum(dropped_now.values())
    t = time.perf_counter()
    whole = table.to_arrow()
    rd.metrics.write(whole)
    tensorboard.close()
    curves = learning_curves(whole)
    png = png_bytes(curves, title=f"scale-{n}")
    end_s = time.perf_counter() - t
    for g in groups:
        ray.kill(g)
    ray.kill(bus)
    _as_a_run(rd, n, table, stragglers)
    return {**_read_back(scratch, rd.run_name),
        "ranks": n, "offered_per_s": offered / wall, "taken_per_s": taken / wall, "offered": offered, "taken": taken,
        "coalesced": coalesced, "not_sent": sum(s["dropped_here"] for s in sent),
        "pushes": sum(s["pushes"] for s in sent),
        "late_ticks": sum(s["late_ticks"] for s in sent), "ticks": sum(s["ticks"] for s in sent),
        "intake_p50": _pct(intake_lag, 0.5), "intake_p99": _pct(intake_lag, 0.99),
        "parquet_p50": _pct(parquet_lag, 0.5), "parquet_p99": _pct(parquet_lag, 0.99),
        "driver_cpu": loop_cpu / wall, "bus_cpu": (cpu1[bus_pid] - cpu0[bus_pid]) / wall,
        "reporters_cpu": sum(cpu1[p] - cpu0[p] for p in pids) / wall,
        "cost_p50_us": statistics.median(s["cost_p50_us"] for s in sent),
        "cost_p99_us": max(s["cost_p99_us"] for s in sent),
        "end_s": end_s, "rows_total": whole.num_rows, "png_kib": len(png) / 1024,
    }


def _as_a_run(rd: RunDir, n: int, table: MetricsTable, stragglers: Stragglers) -> None:
    """config.yaml and result.json beside the metrics just written, as the driver of a run of `n` workers writes
    them (its tasks, one attempt, the stragglers found, the final metrics): what `python -m raytf.runs` reads."""
    from raytf._core.tasks import TaskInfo
    from raytf._storage import CONFIG_FILE, RESULT_FILE
    from raytf.config import load_config, redacted, to_yaml

    cfg = load_config(os.path.join(ROOT, "conf", "local.yaml"),
                      [f"run.name={rd.run_name}", f"cluster.num_workers={n}"])
    rd.write_text(CONFIG_FILE, to_yaml(redacted(cfg)))
    node = [f"{i:056x}" for i in range(math.ceil(n / NODE_CPUS))]  # (Ray's node ids: 56 hex digits)
    tasks = [TaskInfo("worker", r, r, f"198.18.0.{r // NODE_CPUS + 1}", 20000 + r % NODE_CPUS, node[r // NODE_CPUS],
                      0).to_json() for r in range(n)]
    rd.write_json(RESULT_FILE, {
        "run": rd.run_name, "status": "succeeded", "strategy": cfg.cluster.strategy.value, "roles": {"worker": n},
        "tasks": tasks, "attempts": [{"attempt": 1, "status": "succeeded"}], "stragglers": stragglers.to_json(),
        "final_metrics": table.final()})


def _read_back(storage: str, run: str) -> dict:
    """Wall seconds of `python -m raytf.runs show`, `plot` and `plot --ranks` of the run, each a fresh process."""
    took = {}
    for key, args in (("show_s", ["show", run]), ("curves_s", ["plot", run, "--out", "curves.png"]),
                      ("ranks_plot_s", ["plot", run, "--ranks", "--out", "ranks.png"])):
        t = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "raytf.runs", *args, "--storage", storage], cwd=storage,
                              capture_output=True, text=True, timeout=600)
        took[key] = time.perf_counter() - t
        if proc.returncode != 0 or not proc.stdout.strip():
            raise RuntimeError(f"raytf.runs {' '.join(args)}: exit {proc.returncode}: {proc.stderr.strip()[-800:]}")
    return took


@ray.remote(num_cpus=1)
class Bare:
    """Ray's own floor: an actor that does nothing but answer."""

    def ping(self) -> int:
        return os.getpid()


def _rss_mib() -> float:
    import psutil

    return psutil.Process().memory_info().rss / 2**20


def _process_cpu_s(pids: list[int]) -> float:
    """The median CPU seconds (user + system) the processes `pids` have used so far: on one machine a task's
    start is CPU (its imports), and this does not scatter with the shared cores' wall clock as the totals do."""
    return statistics.median(_cpu(p) for p in pids)


def _bare(n: int) -> dict:
    """Ray's own: `n` bare actors in a placement group of `n` one-CPU bundles (SPREAD), each answering once."""
    from ray.util.placement_group import placement_group, remove_placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    t = time.perf_counter()
    pg = placement_group([{"CPU": 1.0}] * n, strategy="SPREAD")
    ray.get(pg.ready(), timeout=600)
    actors = [Bare.options(scheduling_strategy=PlacementGroupSchedulingStrategy(pg, placement_group_bundle_index=i))
              .remote() for i in range(n)]
    bare_pids = ray.get([a.ping.remote() for a in actors], timeout=600)
    bare_up = time.perf_counter() - t
    bare_cpu = _process_cpu_s(bare_pids)
    t = time.perf_counter()
    for a in actors:
        ray.kill(a)
    remove_placement_group(pg)
    return {"bare_up": bare_up, "bare_down": time.perf_counter() - t, "bare_cpu_s": bare_cpu}


def _raytf(n: int, scratch: str, name: str) -> dict:
    """raytf's TaskGroup of `n` workers in the same shape: placed and started, all addressed with every TF_CONFIG
    made, torn down."""
    from raytf._core import topology
    from raytf._core.plan import make_plan
    from raytf._driver import placement
    from raytf._driver.group import TaskGroup
    from raytf.config import load_config

    cfg = load_config(os.path.join(ROOT, "conf/local.yaml"), [
        f"run.name={name}", f"storage.path={scratch}", f"cluster.num_workers={n}", "cluster.worker.cpus=1",
        "cluster.placement_strategy=SPREAD", "cluster.standby=0", "cluster.startup_timeout_s=600",
        "cluster.placement_timeout_s=600"])
    rd = RunDir(scratch, cfg.run.name)
    rd.makedirs()
    cpu, t = _own_cpu(), time.perf_counter()
    plan = make_plan(cfg)
    group = TaskGroup(cfg, plan, rd, embedded=False)
    try:
        group.start(placement.reserve(plan, timeout_s=cfg.cluster.placement_timeout_s, name=f"raytf:{cfg.run.name}"))
        placed = time.perf_counter() - t
        infos = group.addresses()
        spec = topology.cluster_spec([topology.TaskAddress(i.role, i.index, i.host, i.port) for i in infos])
        configs = [topology.tf_config(spec, i.role, i.index) for i in infos]
        addressed = time.perf_counter() - t
        rss = _rss_mib()
        task_cpu = _process_cpu_s([i.pid for i in infos])
    finally:
        t2 = time.perf_counter()
        group.teardown()
        down = time.perf_counter() - t2
    assert len(configs) == n and len(spec["worker"]) == n, "a task group of the wrong size"
    return {"placed": placed, "addressed": addressed, "down": down, "driver_cpu_s": _own_cpu() - cpu,
            "driver_rss_mib": rss, "task_cpu_s": task_cpu}


def orchestrate(n: int, scratch: str, rounds: int) -> dict:
    """One size: Ray's bare actors and raytf's task group, `rounds` times, the order alternating (the side that
    goes second may start on nodes still reaping the first side's processes); the medians of each side's numbers, and
    raytf's all-addressed beyond Ray's own taken round by round (`beyond`: the median; `beyond_rounds`: each)."""
    rows = interleaved(rounds, ["ray", "raytf"], lambda c, r: {
        "contender": c, "round": r, **(_bare(n) if c == "ray" else _raytf(n, scratch, f"scale-{n}-{r}"))})
    beyond = paired(rows, "ray", "bare_up", "raytf", "addressed")
    return {"tasks": n, **medians(rows, "ray"), **medians(rows, "raytf"), "beyond": statistics.median(beyond),
            "beyond_rounds": beyond}


def _orchestration(sizes: list[int], rounds: int) -> list[dict]:
    from ray.cluster_utils import Cluster

    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "include_dashboard": False})
    try:
        for _ in range(math.ceil(max(sizes) / NODE_CPUS)):
            c.add_node(num_cpus=NODE_CPUS)
        ray.init(address=c.address, log_to_driver=False)
        try:
            with tempfile.TemporaryDirectory(prefix="raytf-bench-scale-") as scratch:
                out = []
                for n in sizes:
                    out.append(orchestrate(n, scratch, rounds))
                    print(f"{n} tasks: all addressed in {out[-1]['addressed']:.1f} s", flush=True)
                return out
        finally:
            ray.shutdown()
    finally:
        c.shutdown()


def _intake(sizes: list[int], seconds: float, interval: float, reporters: int) -> list[dict]:
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        with tempfile.TemporaryDirectory(prefix="raytf-bench-scale-") as scratch:
            results = []
            for n in sizes:
                results.append(measure(n, seconds, interval, reporters, scratch))
                print(f"{n} ranks: {results[-1]['taken']} rows taken of {results[-1]['offered']}", flush=True)
            return results
    finally:
        ray.shutdown()


def _training(sizes: list[int], hand_max: int, epochs: int, steps: int, batch: int) -> list[dict]:
    """Part 3: each size hand-launched (up to hand_max) then through raytf, on one Ray started here."""
    from benchmarks import run as bench

    os.chdir(ROOT)  # raytf's tasks import benchmarks.workload from the driver's working directory
    cores = os.cpu_count() or 2
    ray.init(address="local", num_cpus=cores, include_dashboard=False, log_to_driver=False, configure_logging=False)
    rows = []
    try:
        with tempfile.TemporaryDirectory(prefix="raytf-bench-scale-") as scratch:
            for n in sizes:
                s = bench.Setup(n, epochs, steps, batch, Path(scratch))
                hand = bench.hand(s, Path(scratch) / f"hand-{n}") if n <= hand_max else None
                out = Path(scratch) / f"raytf-{n}"
                ours = bench._raytf("raytf MWMS, function", s, out, "conf/local.yaml", [
                    "train.entrypoint=benchmarks.workload:train", f"train.params.out={out}", *bench._LEAN,
                    "cluster.standby=0", f"cluster.worker.cpus={min(1.0, cores / n):.4f}",
                    "cluster.startup_timeout_s=600"],
                    batch * n)
                row = {"workers": n}
                for who, t in (("hand", hand), ("raytf", ours)):
                    if t is not None and t.error:
                        raise RuntimeError(f"{n} workers, {t.contender}: {t.error}")
                    row.update({f"{who}_first_step_s": t.first_step_s if t else None,
                                f"{who}_step_ms": t.step_ms if t else None, f"{who}_wall_s": t.wall_s if t else None,
                                f"{who}_peak_rss_mb": t.peak_rss_mb if t else None})
                rows.append(row)
                print(f"{n} workers trained: raytf first step {ours.first_step_s:.1f} s"
                      + (f", hand {hand.first_step_s:.1f} s" if hand else ""), flush=True)
    finally:
        ray.shutdown()
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.scale", description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", default="8,32,128", help="orchestration: task group sizes ('' skips the part)")
    ap.add_argument("--rounds", type=int, default=3,
                    help="orchestration: rounds of each size, Ray's and raytf's alternating in order (medians)")
    ap.add_argument("--ranks", default="8,32,128,512", help="intake: reporting ranks ('' skips the part)")
    ap.add_argument("--seconds", type=float, default=20.0, help="how long the ranks report, per size")
    ap.add_argument("--interval", type=float, default=0.1, help="seconds between two rows of one rank")
    ap.add_argument("--reporters", type=int, default=4, help="processes that speak for the ranks")
    ap.add_argument("--train", default="2,4,8,16", help="real training: MWMS workers ('' skips the part)")
    ap.add_argument("--hand-max", type=int, default=8, help="hand-launched training up to this many workers")
    ap.add_argument("--smoke", action="store_true",
                    help="8 tasks; 8 ranks for 3 s; 2 workers trained briefly through raytf: the check that it runs")
    ap.add_argument("--plot", help="also draw every cost against N, log-log, into this PNG file")
    ap.add_argument("--json", help="also write both parts' rows to this file")
    a = ap.parse_args(argv)
    if a.rounds < 1:  # (before a cluster is started: the rounds' median needs one)
        ap.error(f"--rounds: {a.rounds}; give 1 or more")
    if ray.is_initialized():
        print("benchmarks.scale starts its own Ray (twice): run it from a fresh process", file=sys.stderr)
        return 2
    tasks = [8] if a.smoke else [int(x) for x in a.tasks.split(",") if x]
    sizes = [8] if a.smoke else [int(x) for x in a.ranks.split(",") if x]
    workers = [2] if a.smoke else [int(x) for x in a.train.split(",") if x]
    seconds = 3.0 if a.smoke else a.seconds
    orch = _orchestration(tasks, 1 if a.smoke else a.rounds) if tasks else []
    results = _intake(sizes, seconds, a.interval, a.reporters) if sizes else []
    # (smoke: 2 epochs of 5 steps; else 2 of 20, the median step taken from the second)
    # (the smoke trains through raytf only: benchmarks.run's smoke runs the hand launch already)
    training = _training(workers, 0 if a.smoke else a.hand_max, 2, 5 if a.smoke else 20, 32) if workers else []
    _tables(orch, results, a.interval, seconds, a.reporters)
    _training_table(training)
    # How each cost grows: its exponent in N (a log-log slope), and the parts growing faster than linearly.
    print("\ngrowth with N (least-squares slope of log cost on log N)\n")
    print("\n".join(loglog.report(orch, results, training)))
    if a.plot:
        fig = loglog.figure(orch, results, training)
        fig.savefig(a.plot, dpi=100)
        print(f"log-log figure: {a.plot}")
    if a.json:
        Path(a.json).write_text(json.dumps({"orchestration": orch, "intake": results, "training": training},
                                           indent=1, default=str))
    return 0


def _tables(orch: list[dict], results: list[dict], interval: float, seconds: float, reporters: int) -> None:
    if orch:
        nodes = math.ceil(max(r["tasks"] for r in orch) / NODE_CPUS)
        print(f"\norchestration: a simulated cluster of {nodes} nodes of {NODE_CPUS} CPUs, "
              f"a task per CPU bundle (SPREAD); seconds, the median of {len(orch[0]['beyond_rounds'])} rounds "
              "(beyond Ray's own: taken round by round, each round's in brackets)\n")
        print("| tasks | Ray: bare actors all answering | Ray: teardown | raytf: placed and started | "
              "raytf: all addressed (TF_CONFIG made) | beyond Ray's own | raytf: teardown | driver CPU s | "
              "driver RSS MiB | a process's CPU s when it answered: Ray's bare actor / raytf's task |")
        print("|---|---|---|---|---|---|---|---|---|---|")
        for r in orch:
            each = ", ".join(f"{b:+.1f}" for b in r["beyond_rounds"])
            print(f"| {r['tasks']} | {r['bare_up']:.2f} | {r['bare_down']:.2f} | {r['placed']:.2f} | "
                  f"{r['addressed']:.2f} | {r['beyond']:+.2f} ({each}) | {r['down']:.2f} | "
                  f"{r['driver_cpu_s']:.2f} | {r['driver_rss_mib']:.0f} | "
                  f"{r['bare_cpu_s']:.2f} / {r['task_cpu_s']:.2f} ({r['task_cpu_s'] - r['bare_cpu_s']:+.2f}) |")
        big = max(orch, key=lambda r: r["tasks"])
        if big["tasks"] >= 128:
            print(f"\ntarget, 128 tasks all addressed under 10 s beyond Ray's own bare actors: "
                  f"{'holds' if big['beyond'] < 10 else 'MISSED'} ({big['beyond']:+.2f} s, the rounds' median)")
    if not results:
        return
    print(f"\nintake: every rank one row each {interval:g} s for {seconds:g} s, {reporters} reporting processes, "
          f"flush every {FLUSH_INTERVAL_S:g} s; CPU as a share of one core\n")
    print("| ranks | rows/s offered | rows/s taken | coalesced by the bus | late ticks | lag to driver p50 / p99 s | "
          "lag to Parquet p50 / p99 s | driver loop CPU | bus CPU | reporters CPU | report cost p50 / p99 µs | "
          "run's end (compaction + curves) s | runs show s | runs plot s | runs plot --ranks s |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in results:
        print(f"| {r['ranks']} | {r['offered_per_s']:.0f} | {r['taken_per_s']:.0f} | {r['coalesced']} | "
              f"{r['late_ticks']}/{r['ticks']} | {r['intake_p50']:.2f} / {r['intake_p99']:.2f} | "
              f"{r['parquet_p50']:.2f} / {r['parquet_p99']:.2f} | {r['driver_cpu']:.2f} | {r['bus_cpu']:.2f} | "
              f"{r['reporters_cpu']:.2f} | {r['cost_p50_us']:.0f} / {r['cost_p99_us']:.0f} | {r['end_s']:.2f} | "
              f"{r['show_s']:.2f} | {r['curves_s']:.2f} | {r['ranks_plot_s']:.2f} |")
    big = max(results, key=lambda r: r["ranks"])
    if big["ranks"] >= 512 and abs(interval - 0.1) < 1e-9:
        holds = big["driver_cpu"] < 1.0 and big["intake_p99"] < 2.0
        print(f"\nbus pushes at {big['ranks']} ranks: {big['pushes']:,} for {big['offered']:,} rows "
              f"({big['offered'] / max(big['pushes'], 1):.1f} rows a push)")
        print(f"target, 512 ranks every 100 ms: driver under 1 core and lag under 2 s: "
              f"{'holds' if holds else 'MISSED'} (driver {big['driver_cpu']:.2f} core, bus {big['bus_cpu']:.2f}, "
              f"lag p99 {big['intake_p99']:.2f} s)")
        print(f"target, the run's end of 512 ranks' table ({big['rows_total']:,} rows) under 5 s: "
              f"{'holds' if big['end_s'] < 5 else 'MISSED'} ({big['end_s']:.2f} s)")
        looks = big["show_s"] < 5 and big["curves_s"] < 5
        print(f"target, `runs show` and `runs plot` (the curves) of 512 ranks' run under 5 s each: "
              f"{'holds' if looks else 'MISSED'} (show {big['show_s']:.2f} s, plot {big['curves_s']:.2f} s; "
              f"plot --ranks {big['ranks_plot_s']:.2f} s)")


def _training_table(rows: list[dict]) -> None:
    if not rows:
        return
    print("\nreal training: the benchmark's CNN, MultiWorkerMirroredStrategy, per-replica batch 32, one TF thread a "
          "worker, all on this machine's cores; raytf with cluster.standby=0 on a running Ray\n")
    print("| workers | hand: launch to first step s | raytf: launch to first step s | raytf ÷ hand | hand: step ms | "
          "raytf: step ms | step raytf ÷ hand | raytf: wall s | peak task RSS MiB |")
    print("|---|---|---|---|---|---|---|---|---|")

    def ratio(a, b):
        return "—" if a is None or b is None else f"{a / b:.2f}"

    def num(v, spec=".1f"):
        return "—" if v is None else format(v, spec)

    for r in rows:
        print(f"| {r['workers']} | {num(r['hand_first_step_s'])} | {num(r['raytf_first_step_s'])} | "
              f"{ratio(r['raytf_first_step_s'], r['hand_first_step_s'])} | {num(r['hand_step_ms'])} | "
              f"{num(r['raytf_step_ms'])} | {ratio(r['raytf_step_ms'], r['hand_step_ms'])} | "
              f"{num(r['raytf_wall_s'])} | {num(r['raytf_peak_rss_mb'], '.0f')} |")


if __name__ == "__main__":
    sys.exit(main())
