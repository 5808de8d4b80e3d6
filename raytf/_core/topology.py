"""Pure topology: task addresses -> TF cluster spec -> each task's TF_CONFIG."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

# Roles that belong in the cluster spec, in TF's conventional order. The evaluator is
# deliberately absent: TF expects it to have only its own `task` (see tf.distribute docs).
CLUSTER_ROLES = ("chief", "worker", "ps")


@dataclass(frozen=True)
class TaskAddress:
    role: str
    index: int
    host: str
    port: int

    @property
    def hostport(self) -> str:
        # IPv6 literals need brackets in gRPC target strings.
        host = f"[{self.host}]" if ":" in self.host and not self.host.startswith("[") else self.host
        return f"{host}:{self.port}"


def cluster_spec(addresses: Sequence[TaskAddress]) -> dict[str, list[str]]:
    """Build {"worker": ["h:p", ...], ...}; indices must be 0..n-1 per role without gaps or repeats."""
    by_role: dict[str, dict[int, str]] = {}
    seen_hostports: dict[str, tuple[str, int]] = {}
    for a in addresses:
        if a.role not in CLUSTER_ROLES:
            continue
        if a.port <= 0 or a.port > 65535:
            raise ValueError(f"{a.role} {a.index}: port {a.port} is not a valid TCP port")
        if a.hostport in seen_hostports:
            other = seen_hostports[a.hostport]
            raise ValueError(f"{a.role} {a.index} and {other[0]} {other[1]} both claim {a.hostport}")
        seen_hostports[a.hostport] = (a.role, a.index)
        slots = by_role.setdefault(a.role, {})
        if a.index in slots:
            raise ValueError(f"two addresses for {a.role} {a.index}")
        slots[a.index] = a.hostport
    spec: dict[str, list[str]] = {}
    for role in CLUSTER_ROLES:
        if role not in by_role:
            continue
        slots = by_role[role]
        if sorted(slots) != list(range(len(slots))):
            raise ValueError(f"{role} indices {sorted(slots)} are not 0..{len(slots) - 1}")
        spec[role] = [slots[i] for i in range(len(slots))]
    if len(spec.get("chief", [])) > 1:
        raise ValueError("a cluster has at most one chief")
    return spec


def tf_config(spec: dict[str, list[str]], role: str, index: int) -> dict:
    """The TF_CONFIG dict for one task of `spec`."""
    if role != "evaluator" and (role not in spec or not 0 <= index < len(spec[role])):
        raise ValueError(f"task {role} {index} is not in the cluster spec {sorted(spec)}")
    return {"cluster": spec, "task": {"type": role, "index": index}}


def is_chief(spec: dict[str, list[str]], role: str, index: int) -> bool:
    """The task that owns the real checkpoint copy and summaries: the chief, else worker 0."""
    if "chief" in spec:
        return role == "chief"
    return role == "worker" and index == 0
