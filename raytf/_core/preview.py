"""A run's plan shown before anything starts (`python -m raytf.launch CONFIG --dry-run`, `raytf.plan(cfg)`):
the tasks, what each one reserves and runs, the placement asked for against what the cluster has, the ports the
TF servers may take and the TF cluster spec's shape. Pure: the cluster's nodes are a parameter (the driver reads
them from Ray, or describes this machine for an embedded Ray)."""

from __future__ import annotations

from dataclasses import dataclass, field

from raytf._core import brief, elastic
from raytf._core.plan import (
    EMBEDDED_PLACEMENT_FIX,
    EVALUATOR,
    PLACEMENT_FIX,
    Plan,
    fmt_resources,
    is_server,
    make_plan,
    shortfall,
    total,
)
from raytf._core.topology import CLUSTER_ROLES
from raytf.config import SINGLE_TASK_STRATEGIES, Config, PlacementStrategy

# Identical tasks in a row (the same role, reservation and program) from this many on are one line of the plan.
COLLAPSE = 3


@dataclass(frozen=True)
class PlannedTask:
    role: str
    index: int
    rank: int
    bundle: dict[str, float]
    runs: str  # what the task's process runs: the function, the script, a TF server


@dataclass(frozen=True)
class Cluster:
    """What the run would be placed on: `nodes` are each alive node's total resources (Ray's names)."""

    where: str  # "an embedded Ray on this machine" or "the Ray cluster at <address>"
    nodes: tuple[dict[str, float], ...]
    embedded: bool
    unchecked: tuple[str, ...] = ()  # resources that cannot be known before Ray starts (embedded: memory)


@dataclass(frozen=True)
class Preview:
    run: str
    strategy: str
    placement_strategy: str
    tasks: tuple[PlannedTask, ...]
    need: dict[str, float]
    cluster: Cluster
    have: dict[str, float]
    cluster_spec: dict[str, list[str]]  # the shape of TF_CONFIG's cluster, with placeholder addresses
    ports: str
    sizes: tuple[int, ...]  # elastic training: the worker counts tried, largest first (one size otherwise)
    problem: str = ""  # why a launch would fail; "" when it could be placed
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def ok(self) -> bool:
        return not self.problem

    def rows(self) -> list[dict[str, object]]:
        """One row per task (a DataFrame's records in a notebook)."""
        return [{"role": t.role, "index": t.index, "rank": t.rank, "bundle": fmt_resources(t.bundle), "runs": t.runs}
                for t in self.tasks]

    def __str__(self) -> str:
        return self.text()

    def text(self, verdict: bool = True) -> str:
        """The plan as the CLI prints it; `verdict`: end with the problem, or that nothing was started."""
        head = [("role", "rank", "reserves", "runs")]
        body = []
        for run in brief.runs(self.tasks, key=lambda t: (t.role, tuple(sorted(t.bundle.items())), t.runs)):
            first, last = run[0], run[-1]
            if len(run) < COLLAPSE:
                body += [(f"{t.role}{t.index}", str(t.rank), fmt_resources(t.bundle), t.runs) for t in run]
            else:  # identical tasks: one row (a plan of 512 workers reads in a screen)
                body.append((f"{first.role}{first.index}-{last.index} x{len(run)}", f"{first.rank}-{last.rank}",
                             fmt_resources(first.bundle), first.runs))
        widths = [max(len(r[c]) for r in head + body) for c in range(4)]
        table = ["  " + "  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip() for r in head + body]
        spec = ", ".join(_spec_shape(role, addrs) for role, addrs in self.cluster_spec.items()) or \
            "none (a single-task strategy runs without TF_CONFIG)"
        lines = [f"plan for run {self.run}: {self.strategy}, {len(self.tasks)} task(s), placement "
                 f"{self.placement_strategy}", *table,
                 f"asks for {fmt_resources(self.need)}; {self.cluster.where} has {fmt_resources(self.have)} on "
                 f"{len(self.cluster.nodes)} node(s)"]
        if self.cluster.unchecked:
            lines.append(f"  not checked before Ray starts: {', '.join(self.cluster.unchecked)}")
        if len(self.sizes) > 1:
            lines.append(f"elastic: {' -> '.join(map(str, self.sizes))} workers, largest first")
        lines += [f"TF cluster spec: {spec}", f"ports: {self.ports}", *self.notes]
        if verdict:
            lines.append(f"cannot launch: {self.problem}" if self.problem else
                         "ok: nothing was reserved or started (drop --dry-run to launch)")
        return "\n".join(lines)


def _spec_shape(role: str, addresses: list[str]) -> str:
    """A role's entries of the TF cluster spec: listed when few, as their shape when many (`worker: 512 x
    <host>:<port>`)."""
    if len(addresses) < COLLAPSE:
        return f"{role}: [{', '.join(addresses)}]"
    return f"{role}: {len(addresses)} x <host>:{addresses[0].rsplit(':', 1)[-1]}"


def _runs(cfg: Config, role: str) -> str:
    t = cfg.train
    if is_server(cfg.cluster.strategy, role):
        return "a TF server (tf.distribute.Server)"
    if role == EVALUATOR:
        return f"evaluator: {t.eval_entrypoint}" if t.eval_entrypoint else "evaluator: the training function"
    if t.script:
        return f"script: {t.script}" + (f" {' '.join(map(str, t.args))}" if t.args else "")
    if t.module:
        return f"module: python -m {t.module}"
    return f"function: {t.entrypoint}"


def _ports(cfg: Config, plan: Plan) -> str:
    c = cfg.cluster
    served = [t for t in plan.tasks if t.role in CLUSTER_ROLES]
    if c.strategy in SINGLE_TASK_STRATEGIES or not served:
        return "none (no TF server)"
    per_host = 1 if c.placement_strategy is PlacementStrategy.STRICT_SPREAD else len(served)
    if not c.port_range:
        return (f"{len(served)} TF server(s), each on a free port the OS gives (set cluster.port_range to keep them "
                "in one range a firewall rule can cover)")
    low, high = c.port_range
    return (f"{len(served)} TF server(s) in cluster.port_range [{low}, {high}] ({high - low + 1} ports): at most "
            f"{per_host} on one host")


def _spec(cfg: Config, plan: Plan) -> dict[str, list[str]]:
    if cfg.cluster.strategy in SINGLE_TASK_STRATEGIES:
        return {}
    port = "<port>" if not cfg.cluster.port_range else f"<{cfg.cluster.port_range[0]}-{cfg.cluster.port_range[1]}>"
    spec: dict[str, list[str]] = {}
    for t in plan.tasks:
        if t.role in CLUSTER_ROLES:
            spec.setdefault(t.role, []).append(f"<{t.role}{t.index} host>:{port}")
    return spec


def _problem(plan: Plan, cluster: Cluster, timeout_s: float) -> str:
    """The line a launch would fail with (_driver.placement.reserve's), or ""."""
    what = f"{len(plan.tasks)} tasks ({plan.placement_strategy})"
    bundles = [{k: v for k, v in b.items() if k not in cluster.unchecked} for b in plan.bundles]
    why = shortfall(bundles, plan.placement_strategy, list(cluster.nodes))
    if not why:
        return ""
    if cluster.embedded:
        return f"placement group for {what} can never be placed on this embedded Ray: {why}. {EMBEDDED_PLACEMENT_FIX}"
    return (f"placement group for {what} cannot be placed on {cluster.where} as it is now: {why} (a launch waits "
            f"cluster.placement_timeout_s={timeout_s:g}s for nodes an autoscaler may add). {PLACEMENT_FIX}")


def preview(cfg: Config, cluster: Cluster) -> Preview:
    """What launching `cfg` on `cluster` would reserve and start, and why it could not (the first reason)."""
    plan = make_plan(cfg)
    sizes = elastic.sizes(cfg).tried if elastic.is_elastic(cfg) else (cfg.cluster.num_workers,)
    # Elastic training starts at the largest size that fits and can go down to the smallest: only the smallest
    # must fit for a launch to train at all.
    smallest = make_plan(elastic.sized(cfg, sizes[-1])) if len(sizes) > 1 else plan
    timeout_s = cfg.cluster.placement_timeout_s
    problem = _problem(smallest, cluster, timeout_s)
    notes: list[str] = []
    if len(sizes) > 1 and not problem and _problem(plan, cluster, timeout_s):
        notes.append(f"elastic: the full size ({cfg.cluster.num_workers} workers) does not fit now; the run would "
                     "start smaller and grow when capacity comes")
    have = total(cluster.nodes)
    return Preview(
        run=cfg.run.name or "<a new run name>", strategy=cfg.cluster.strategy.value,
        placement_strategy=plan.placement_strategy,
        tasks=tuple(PlannedTask(t.role, t.index, t.rank, t.bundle, _runs(cfg, t.role)) for t in plan.tasks),
        need=total(plan.bundles), cluster=cluster, have={k: have.get(k, 0.0) for k in total(plan.bundles)} or have,
        cluster_spec=_spec(cfg, plan), ports=_ports(cfg, plan), sizes=tuple(sizes), problem=problem,
        notes=tuple(notes))
