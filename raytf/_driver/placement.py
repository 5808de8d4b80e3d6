"""Reserve the run's placement group with a deadline, and explain what is missing when it can't be."""

from __future__ import annotations

import logging

import ray
from ray.util.placement_group import PlacementGroup, placement_group, remove_placement_group

from raytf._core.plan import Plan, shortfall
from raytf.errors import PlacementError

log = logging.getLogger(__name__)


def _node_totals() -> list[dict[str, float]]:
    return [dict(n["Resources"]) for n in ray.nodes() if n.get("Alive")]


_FIX = ("Fix: add nodes or resources, lower the per-task reservations (cluster.<role>.cpus/gpus/...) or the "
        "task counts (cluster.num_workers, cluster.num_ps), or raise cluster.placement_timeout_s")


def reserve(plan: Plan, *, timeout_s: float, name: str, can_grow: bool = True) -> PlacementGroup:
    """One bundle per task, all or nothing; raises PlacementError (and releases the group) on timeout.

    With `can_grow=False` (an embedded single-machine Ray: no autoscaler will add nodes) a request the
    cluster can never hold fails at once instead of after the timeout."""
    what = f"placement group for {len(plan.bundles)} tasks ({plan.placement_strategy})"
    if not can_grow:
        why = shortfall(plan.bundles, plan.placement_strategy, _node_totals())
        if why:
            raise PlacementError(f"{what} can never be placed on this embedded Ray: {why}. {_FIX}")
    pg = placement_group(plan.bundles, strategy=plan.placement_strategy, name=name)
    ready, _ = ray.wait([pg.ready()], timeout=timeout_s)
    if ready:
        return pg
    remove_placement_group(pg)
    why = shortfall(plan.bundles, plan.placement_strategy, _node_totals())
    if not why:
        why = f"the cluster could hold it but has only {ray.available_resources()} free now (other jobs)"
    raise PlacementError(f"{what} not ready after cluster.placement_timeout_s={timeout_s:g}s: {why}. {_FIX}")


def release(pg: PlacementGroup | None) -> None:
    if pg is None:
        return
    try:
        remove_placement_group(pg)
    except Exception as e:  # the group may already be gone with its cluster
        log.debug("removing placement group: %s", e)
