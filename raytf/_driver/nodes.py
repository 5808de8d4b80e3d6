"""The cluster's nodes as Ray reports them (`ray.nodes()`): which are alive, what each has. One place for the
question every part of the driver asks (placement, the teardown's sweeps, the standbys' release, the tf.data
service's restarts, the plan of an attached cluster). Imports Ray, never TensorFlow."""

from __future__ import annotations

import ray


def alive() -> set[str]:
    """The ids of the nodes Ray counts alive."""
    return {n["NodeID"] for n in ray.nodes() if n.get("Alive")}


def is_alive(node_id: str) -> bool:
    """Whether Ray still counts `node_id` alive (a node lost is declared dead after a while: ~30-60 s)."""
    return bool(node_id) and node_id in alive()


def totals() -> list[dict[str, float]]:
    """Each alive node's resources (what it has, not what is free)."""
    return [dict(n["Resources"]) for n in ray.nodes() if n.get("Alive")]
