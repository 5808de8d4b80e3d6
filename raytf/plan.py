"""Pure planning: which TF tasks a run needs and what each one reserves (one placement-group bundle each)."""

from __future__ import annotations

from dataclasses import dataclass, field

from raytf.config import Config, Resources, Strategy

# Task types in TF's vocabulary; ranks are assigned in this order.
CHIEF, WORKER, PS, EVALUATOR = "chief", "worker", "ps", "evaluator"


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


def _task(role: str, index: int, rank: int, r: Resources) -> TaskSpec:
    memory = int(r.memory_gb * 1024**3) if r.memory_gb else None
    return TaskSpec(role, index, rank, r.cpus, r.gpus, memory, dict(r.custom))


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
    tasks = []
    for role, count, resources in roles:
        tasks += [_task(role, i, len(tasks) + i, resources) for i in range(count)]
    return Plan(tasks=tuple(tasks), placement_strategy=c.placement_strategy.value)


def _fits(bundle: dict[str, float], node: dict[str, float]) -> bool:
    return all(node.get(k, 0.0) >= v for k, v in bundle.items())


def _fmt(resources: dict[str, float]) -> str:
    def num(v: float) -> str:
        return f"{v:g}" if abs(v) < 1e6 else f"{v / 1024**3:.1f}GiB"

    return "{" + ", ".join(f"{k}: {num(v)}" for k, v in sorted(resources.items())) + "}"


def shortfall(bundles: list[dict[str, float]], strategy: str, nodes: list[dict[str, float]]) -> str:
    """Why `bundles` cannot be placed on `nodes` (each node's total resources), in one sentence;
    "" when they could fit (the cluster is then merely busy)."""
    need: dict[str, float] = {}
    for b in bundles:
        for k, v in b.items():
            need[k] = need.get(k, 0.0) + v
    have: dict[str, float] = {}
    for n in nodes:
        for k, v in n.items():
            have[k] = have.get(k, 0.0) + v
    missing = {k: v - have.get(k, 0.0) for k, v in need.items() if have.get(k, 0.0) < v}
    if missing:
        return (f"the cluster lacks {_fmt(missing)} (needs {_fmt(need)} in all, has "
                f"{_fmt({k: have.get(k, 0.0) for k in need})})")
    too_big = [b for b in bundles if not any(_fits(b, n) for n in nodes)]
    if too_big:
        return f"no single node can hold a bundle of {_fmt(too_big[0])}"
    if strategy == "STRICT_SPREAD":
        distinct = sum(1 for n in nodes if any(_fits(b, n) for b in bundles))
        if distinct < len(bundles):
            return (f"STRICT_SPREAD needs {len(bundles)} distinct nodes that can each hold a bundle, "
                    f"the cluster has {distinct}")
    if strategy == "STRICT_PACK" and not any(_fits(need, n) for n in nodes):
        return f"STRICT_PACK needs one node with {_fmt(need)}, none has that much"
    return ""
