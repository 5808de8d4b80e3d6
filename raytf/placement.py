"""Reserve the run's placement group with a deadline, and explain what is missing when it can't be."""

from __future__ import annotations

import logging

import ray
from ray.util.placement_group import PlacementGroup, placement_group, remove_placement_group

from raytf.errors import PlacementError
from raytf.plan import Plan, shortfall

log = logging.getLogger(__name__)


def _node_totals() -> list[dict[str, float]]:
    return [dict(n["Resources"]) for n in ray.nodes() if n.get("Alive")]


def reserve(plan: Plan, *, timeout_s: float, name: str) -> PlacementGroup:
    """One bundle per task, all or nothing; raises PlacementError (and releases the group) on timeout."""
    pg = placement_group(plan.bundles, strategy=plan.placement_strategy, name=name)
    ready, _ = ray.wait([pg.ready()], timeout=timeout_s)
    if ready:
        return pg
    remove_placement_group(pg)
    why = shortfall(plan.bundles, plan.placement_strategy, _node_totals())
    if not why:
        why = f"the cluster could hold it but has only {ray.available_resources()} free now (other jobs)"
    raise PlacementError(
        f"placement group for {len(plan.bundles)} tasks ({plan.placement_strategy}) not ready after "
        f"cluster.placement_timeout_s={timeout_s:g}s: {why}. Fix: add nodes or resources, lower the "
        f"per-task reservation (cluster.worker.*) or cluster.num_workers, or wait longer"
    )


def release(pg: PlacementGroup | None) -> None:
    if pg is None:
        return
    try:
        remove_placement_group(pg)
    except Exception as e:  # the group may already be gone with its cluster
        log.debug("removing placement group: %s", e)
