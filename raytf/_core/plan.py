"""Pure planning: which TF tasks a run needs, what each one reserves (one placement-group bundle each), what it
runs and with which runtime_env, and why a placement cannot be satisfied."""

from __future__ import annotations

import ast
import copy
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from raytf._core import brief, shipping
from raytf._core.tasks import TaskInfo
from raytf.config import Strategy, StreamOutput

if TYPE_CHECKING:
    from raytf.config import Config, Resources

# Task types in TF's vocabulary; ranks are assigned in this order.
CHIEF, WORKER, PS, EVALUATOR = "chief", "worker", "ps", "evaluator"

# Set in every task's runtime_env, so they hold before TensorFlow is first imported in the process:
# tf.keras must be tf-keras (Keras 3 has no multi-worker fit nor ParameterServerStrategy path), and TF's
# gRPC server must accept the port the task's actor is holding with SO_REUSEPORT (tensorflow PR#38705).
# TF_CPP_MIN_LOG_LEVEL only mutes TF's C++ INFO lines (users may set their own).
TASK_ENV = {"TF_USE_LEGACY_KERAS": "1", "TF_GRPC_REUSE_PORT": "true", "TF_CPP_MIN_LOG_LEVEL": "1"}


@dataclass(frozen=True)
class TaskSpec:
    """One TF task: its role, its index within the role, its global rank and its reservation."""

    role: str
    index: int
    rank: int
    cpus: float
    gpus: float
    memory_bytes: int | None = None
    custom: dict[str, float] = field(default_factory=dict)
    # cluster.port_range: the ports this task may hold for its TF server (inclusive); None = any the OS gives.
    port_range: tuple[int, int] | None = None

    @property
    def bundle(self) -> dict[str, float]:
        """The placement-group bundle (Ray resource names) this task reserves."""
        b: dict[str, float] = {}
        if self.cpus:
            b["CPU"] = self.cpus
        if self.gpus:
            b["GPU"] = self.gpus
        if self.memory_bytes:
            b["memory"] = self.memory_bytes
        b.update(self.custom)
        return b

    @property
    def threads(self) -> int:
        """TF threads this task may use: its CPU share, at least one."""
        return max(1, int(self.cpus))


@dataclass(frozen=True)
class Plan:
    tasks: tuple[TaskSpec, ...]
    placement_strategy: str

    @property
    def bundles(self) -> list[dict[str, float]]:
        return [t.bundle for t in self.tasks]


def _task(role: str, index: int, rank: int, r: Resources, ports: tuple[int, int] | None) -> TaskSpec:
    memory = int(r.memory_gb * 1024**3) if r.memory_gb else None
    return TaskSpec(role, index, rank, r.cpus, r.gpus, memory, dict(r.custom), ports)


def make_plan(cfg: Config) -> Plan:
    """Tasks for the configured strategy, ranked in cluster-spec order (chief, workers, ps, evaluator)."""
    c = cfg.cluster
    roles: list[tuple[str, int, Resources]] = []
    if c.strategy is Strategy.parameter_server:
        roles.append((CHIEF, 1, c.chief))
    roles.append((WORKER, c.num_workers, c.worker))
    if c.strategy is Strategy.parameter_server:
        roles.append((PS, c.num_ps, c.ps))
    if c.evaluator.enabled:
        roles.append((EVALUATOR, 1, c.evaluator))
    ports = (c.port_range[0], c.port_range[1]) if c.port_range else None
    tasks = []
    for role, count, resources in roles:
        tasks += [_task(role, i, len(tasks) + i, resources, ports) for i in range(count)]
    return Plan(tasks=tuple(tasks), placement_strategy=c.placement_strategy.value)


def _fits(bundle: dict[str, float], node: dict[str, float]) -> bool:
    return all(node.get(k, 0.0) >= v for k, v in bundle.items())


def spare_nodes(bundles: list[dict[str, float]], nodes: dict[str, dict[str, float]], avoid: set[str]) -> list[str]:
    """Nodes not in `avoid` that could each hold one of `bundles` (`nodes`: id -> what it has), a different one for
    each bundle while there are: where standbys are warmed for the tasks of a node being drained, since the next
    attempt is placed off it (Ray chooses where: a best guess)."""
    out: list[str] = []
    for b in bundles:
        spare = next((n for n in sorted(nodes) if n not in avoid and n not in out and _fits(b, nodes[n])), None)
        if spare is not None:
            out.append(spare)
    return out


# The fix every placement failure names (_driver/placement.py, and a dry run's: _core/preview.py).
PLACEMENT_FIX = ("Fix: add nodes or resources, lower the per-task reservations (cluster.<role>.cpus/gpus/...) or the "
                 "task counts (cluster.num_workers, cluster.num_ps), or raise cluster.placement_timeout_s")
# On an embedded Ray nothing will free up or be added by waiting longer: what this machine offers is all there is.
EMBEDDED_PLACEMENT_FIX = ("Fix: lower the per-task reservations (cluster.<role>.cpus/gpus/...) or the task counts "
                          "(cluster.num_workers, cluster.num_ps), let the embedded Ray offer more CPUs than it sees "
                          "(ray.num_cpus=N: the tasks then share the cores), or join a cluster (ray.address)")


def placement_fix(embedded: bool) -> str:
    """What to change when a placement group cannot be placed: never a longer wait on an embedded Ray."""
    return EMBEDDED_PLACEMENT_FIX if embedded else PLACEMENT_FIX


def fmt_resources(resources: dict[str, float]) -> str:
    def num(v: float) -> str:
        return f"{v:g}" if abs(v) < 1e6 else f"{v / 1024**3:.1f}GiB"

    return "{" + ", ".join(f"{k}: {num(v)}" for k, v in sorted(resources.items())) + "}"


def total(resources: Sequence[dict[str, float]]) -> dict[str, float]:
    """The sum of several bundles' (or nodes') resources, by kind."""
    out: dict[str, float] = {}
    for r in resources:
        for k, v in r.items():
            out[k] = out.get(k, 0.0) + v
    return out


BUSY = "the cluster could hold it"  # (how busy's line starts: the request waits its turn, cluster.queue_timeout_s)


def busy(need: dict[str, float], free: dict[str, float], holders: list[tuple[str, dict[str, float]]] | None) -> str:
    """Why a request of `need` in all, which the cluster could hold, is not placed now, in one sentence: what of each
    kind it needs is free, and who holds the rest (`holders`: (a placement group's name, or "" for an unnamed one;
    what it holds); None when unknown). Only the kinds the request needs are named: Ray's own resource names
    (`bundle_group_*`, `CPU_group_*`, `node:__internal_head__`, its bookkeeping of placement groups and nodes) never
    show (raytf issue 52: a second run's message listed them)."""
    kinds = sorted(need)
    free_here = {k: max(0.0, free.get(k, 0.0)) for k in kinds}
    line = (f"{BUSY} but has only {fmt_resources(free_here)} of the {fmt_resources(need)} it "
            "needs free now")
    if holders is None:
        return line
    mine = [(name, {k: held[k] for k in kinds if held.get(k, 0.0) > 0}) for name, held in holders]
    mine = [(name, held) for name, held in mine if held]
    named = sorted(f"{name} {fmt_resources(held)}" for name, held in mine if name)
    unnamed = [held for name, held in mine if not name]
    if unnamed:
        named.append(f"{len(unnamed)} unnamed placement group(s) {fmt_resources(total(unnamed))}")
    held_by = ("held by placement groups: " + ", ".join(named) if named
               else "held by tasks and actors outside placement groups (other jobs)")
    return f"{line}, {held_by}"


def shortfall(bundles: list[dict[str, float]], strategy: str, nodes: list[dict[str, float]]) -> str:
    """Why `bundles` cannot be placed on `nodes` (each node's total resources), in one sentence;
    "" when they could fit (the cluster is then merely busy)."""
    need, have = total(bundles), total(nodes)
    missing = {k: v - have.get(k, 0.0) for k, v in need.items() if have.get(k, 0.0) < v}
    if missing:
        return (f"the cluster lacks {fmt_resources(missing)} (needs {fmt_resources(need)} in all, has "
                f"{fmt_resources({k: have.get(k, 0.0) for k in need})})")
    too_big = [b for b in bundles if not any(_fits(b, n) for n in nodes)]
    if too_big:
        return f"no single node can hold a bundle of {fmt_resources(too_big[0])}"
    if strategy == "STRICT_SPREAD":
        distinct = sum(1 for n in nodes if any(_fits(b, n) for b in bundles))
        if distinct < len(bundles):
            return (f"STRICT_SPREAD needs {len(bundles)} distinct nodes that can each hold a bundle, "
                    f"the cluster has {distinct}")
    if strategy == "STRICT_PACK" and not any(_fits(need, n) for n in nodes):
        return f"STRICT_PACK needs one node with {fmt_resources(need)}, none has that much"
    return ""


# What Ray's v1 autoscaler (the default of `ray up` clusters, and of KubeRay unless configured) says when a request
# fits no node type it can add: an event line of its log, which Ray sends every driver ("(autoscaler +Ns) Error: ..."
# on its terminal). Ray 2.60 ray/autoscaler/_private/autoscaler.py, _report_pending_infeasible, repeated every 30 s
# while the request stands; the request printed as a dict: one bundle, or a STRICT_PACK group's total (v1 asks for
# those as one). The v2 autoscaler says it in the GCS's autoscaling state instead (nodes.infeasible). A cluster
# started without an autoscaling config runs the v1 autoscaler too, its node types the nodes it has (Ray 2.60
# monitor.py, a read-only provider): there the same event says no node it has can hold the request.
AUTOSCALER_EVENT = ":event_summary:"
# (A STRICT_PACK group's total is printed as a defaultdict: "request defaultdict(<class 'float'>, {...})".)
_NEVER = re.compile(r"No available node types can fulfill resource request (?:defaultdict\([^,]*, )?(\{[^{}]*\})")


def never_request(line: str) -> dict[str, float] | None:
    """The request of a v1 autoscaler event line saying no node type can fulfil it; None for any other line."""
    event = line.partition(AUTOSCALER_EVENT)[2]
    match = _NEVER.search(event) if event else None
    if match is None:
        return None
    try:
        request = ast.literal_eval(match.group(1))
    except (ValueError, SyntaxError):
        return None
    if not isinstance(request, dict) or not all(isinstance(k, str) and isinstance(v, int | float)
                                                for k, v in request.items()):
        return None
    return {k: float(v) for k, v in request.items()}


def unmet_bundle(request: dict[str, float], bundles: Sequence[dict[str, float]],
                 strategy: str) -> dict[str, float] | None:
    """The bundle of ours (or, under STRICT_PACK, the group's total) that an autoscaler's never-request is, by its
    resources: the v1 autoscaler names no placement group. None when it is none of ours."""
    def same(a: dict[str, float]) -> bool:
        return {k: float(v) for k, v in a.items() if v} == {k: v for k, v in request.items() if v}

    candidates = [total(bundles)] if strategy == "STRICT_PACK" else list(bundles)
    return next((b for b in candidates if same(b)), None)


def is_server(strategy: Strategy, role: str) -> bool:
    """ParameterServerStrategy ps and worker tasks run TF servers, not the user function."""
    return strategy is Strategy.parameter_server and role in (WORKER, PS)


def streamed(choice: StreamOutput, rank: int) -> bool:
    """Whether the driver prints this rank's output, a function's or a script's (rank 0 by default, so N workers do
    not flood it)."""
    return choice is StreamOutput.all or (choice is StreamOutput.rank0 and rank == 0)


def actor_name(run: str, role: str, rank: int) -> str:
    return f"raytf:{run}:{role}:{rank}"


def task_table(infos: list[TaskInfo], specs: tuple[TaskSpec, ...]) -> str:
    """The start-up summary: one line per task with where it runs and what it holds; by node, tasks alike on one
    node (role, host, reservation, devices) from three on in one line (512 ranks read in a screen)."""
    by_rank = {t.rank: t for t in specs}
    rows = [("role", "rank", "node", "address", "cpus", "gpus", "CUDA_VISIBLE_DEVICES")]

    def alike(i: TaskInfo) -> tuple:
        t = by_rank[i.rank]
        return i.node_id, i.role, i.host, t.cpus, t.gpus, i.cuda_visible_devices

    ordered = sorted(infos, key=lambda i: (i.node_id, i.rank)) if len(infos) >= 3 else infos
    for run in brief.runs(ordered, key=alike):
        t = by_rank[run[0].rank]
        if len(run) < 3:
            rows += [(i.role, str(i.rank), i.node_id[:12], i.address, f"{t.cpus:g}", f"{t.gpus:g}",
                      i.cuda_visible_devices or "-") for i in run]
            continue
        ports = brief.spans(i.port for i in run if i.port is not None) or "-"
        rows.append((f"{run[0].role} x{len(run)}", brief.spans(i.rank for i in run), run[0].node_id[:12],
                     f"{run[0].host}:{ports}", f"{t.cpus:g}", f"{t.gpus:g}", run[0].cuda_visible_devices or "-"))
    widths = [max(len(r[c]) for r in rows) for c in range(len(rows[0]))]
    return "\n".join("  " + "  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip() for r in rows)


def task_runtime_env(cfg: Config, t: TaskSpec) -> dict[str, Any]:
    """The task actor's runtime_env: the user's (less what only the Ray job can take: shipping.task_level), plus
    what must be set before TensorFlow is imported in that process (the user's own env_vars win). Pure."""
    runtime_env = copy.deepcopy(shipping.task_level(cfg.ray.runtime_env))
    env_vars = shipping.env_text(runtime_env.get("env_vars"))
    for k, v in TASK_ENV.items():
        env_vars.setdefault(k, v)
    # oneDNN's OpenMP pool sizes itself from OMP_NUM_THREADS, not from tf.config.threading: keep the two
    # equal (Ray's own default follows num_cpus only, and cluster.threads may differ). With 2 OpenMP threads
    # each, two workers on 2 cores measured ~5% slower per step (benchmarks/RESULTS.md).
    env_vars.setdefault("OMP_NUM_THREADS", str(cfg.cluster.threads or t.threads))
    if cfg.cluster.strategy is Strategy.parameter_server:
        # gRPC calls fail fast on an unreachable worker, so the coordinator can reschedule (TF's PSS guide).
        env_vars.setdefault("GRPC_FAIL_FAST", "use_caller")
    runtime_env["env_vars"] = env_vars
    return runtime_env


# What raytf itself puts in a task's environment (task_runtime_env): each read when TensorFlow is imported or first
# opens a channel (libgomp's pool at its load, TF's logging and legacy Keras at import, gRPC at its first channel),
# so the task's process may set them itself, first thing, instead of Ray setting them at the process's start.
IN_PROCESS_ENV = frozenset({*TASK_ENV, "OMP_NUM_THREADS", "GRPC_FAIL_FAST"})


def actor_env(runtime_env: dict[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    """A task's runtime_env (task_runtime_env) split into (the actor's `runtime_env` option, the variables its process
    sets itself before TensorFlow's import: TaskActor's `env`). An actor with a runtime_env of its own needs a worker
    process started for it; without one, Ray hands it a worker it pre-started (two actors answering 0.258 s after a
    fresh ray.init against 1.455 s: benchmarks/actor_start.py). So raytf's own variables move into the process, and
    only when that empties the runtime_env: anything of the user's (a package, a variable such as LD_LIBRARY_PATH,
    which must be there when the process starts) keeps the whole of it where Ray sets it. Pure."""
    env_vars = runtime_env.get("env_vars") or {}
    if set(runtime_env) - {"env_vars"} or set(env_vars) - IN_PROCESS_ENV:
        return runtime_env, {}
    return {}, dict(env_vars)
