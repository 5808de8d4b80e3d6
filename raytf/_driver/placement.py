"""Reserve the run's placement group with a deadline, and explain what is missing when it can't be."""

from __future__ import annotations

import contextlib
import logging
import time

import ray
from ray.util.placement_group import PlacementGroup, placement_group, remove_placement_group

from raytf._core import private_apis as apis
from raytf._core.plan import BUSY, Plan, busy, fmt_resources, placement_fix, shortfall, total, unmet_bundle
from raytf._driver import nodes
from raytf.errors import PlacementError

log = logging.getLogger(__name__)


# How long a node a failure left unreachable is avoided while Ray still counts it alive (at most half of
# cluster.placement_timeout_s, so a node that was only slow can still be used in time): Ray declares a host
# that stopped answering dead in ~30-60 s.
AVOID_S = 90.0
# A group that waits (a busy cluster, nodes an autoscaler may add) says so this long into its wait, then every
# QUEUE_LINE_S: what it needs, what is free, who holds the rest, how long it has waited (raytf issue 52).
FIRST_LINE_S = 5.0
QUEUE_LINE_S = 60.0


def avoiding(avoid: set[str], bundles: int) -> dict:
    """placement_group's keyword arguments that keep `bundles` bundles off the nodes `avoid`. Ray labels every node
    with its id (ray.io/node-id); "!in(a,b)" keeps a bundle off those nodes. Only passed when needed: Ray before
    2.47 has no such argument; one without it (raytf/_core/private_apis.py, AVOID_NODES) places as it would."""
    if not avoid or not apis.available(apis.AVOID_NODES, log.warning):
        return {}
    return {"bundle_label_selector": [{"ray.io/node-id": f"!in({','.join(sorted(avoid))})"} for _ in range(bundles)]}


def bundle_nodes(pg: PlacementGroup) -> dict[int, str] | None:
    """Bundle index -> the node it was placed on, from Ray's placement group table (its "bundles_to_node_id", not a
    documented field: raytf/_core/private_apis.py, STANDBY_SLOTS); None when unknown."""
    if not apis.available(apis.STANDBY_SLOTS, log.warning):
        return None
    try:
        return dict(ray.util.placement_group_table(pg)["bundles_to_node_id"])
    except KeyError as e:
        apis.SWITCHES.turn_off(apis.PG_TABLE, f"changed: no {e} in its table", log.warning)
    except (ray.exceptions.RayError, TypeError, ValueError) as e:  # (the group gone: this attempt has no slots)
        log.debug("placement group table: %s", e)
    return None


def _group(plan: Plan, name: str, avoid: set[str]) -> tuple[PlacementGroup, object]:
    kwargs = avoiding(avoid, len(plan.bundles))
    pg = placement_group(plan.bundles, strategy=plan.placement_strategy, name=name, **kwargs)
    return pg, pg.ready()


def reserve(plan: Plan, *, timeout_s: float, name: str, can_grow: bool = True, avoid: set[str] | None = None,
            poll_s: float = 2.0, what: str | None = None, fix: str | None = None,
            queue_s: float = 0.0) -> PlacementGroup:
    """One bundle per task, all or nothing; raises PlacementError (and releases the group) on timeout, and on
    anything raised meanwhile (Ctrl-C: nothing is left pending on the cluster).

    With `can_grow=False` (an embedded single-machine Ray: no autoscaler will add nodes) a request the
    cluster can never hold fails at once instead of after the timeout.

    `queue_s`: on a cluster whose nodes could hold the group but others hold what it needs (a shared cluster, where
    runs queue: cluster.queue_timeout_s), how much longer than `timeout_s` it waits its turn (inf: as long as it
    takes). While it waits, one line at FIRST_LINE_S and every QUEUE_LINE_S says what for.

    `avoid`: nodes the last failure left unreachable (failure.unreachable_nodes). Ray counts a host cut off the
    network alive for a while, and a group offered to it then stays pending for good (Ray 2.60: one bundle
    reserved on a live node, the two-phase reservation on the lost one never answered; raytf issue 16's
    partition test). So they are kept out of the group while Ray counts them alive, for at most AVOID_S (and
    half the timeout). `what` and `fix` say whose group it is and what to change (the tasks' by default)."""
    what = what or f"placement group for {len(plan.bundles)} tasks ({plan.placement_strategy})"
    fix = fix or placement_fix(embedded=not can_grow)
    if not can_grow:
        why = shortfall(plan.bundles, plan.placement_strategy, nodes.totals())
        if why:
            raise PlacementError(f"{what} can never be placed on this embedded Ray: {why}. {fix}", never=True)
    # (Listening from before the request: the v1 autoscaler says its verdict once, within a second or so, then
    # every 30 s.)
    with nodes.autoscaler_events() if can_grow else contextlib.nullcontext() as events:
        return _reserve(plan, timeout_s=timeout_s, name=name, can_grow=can_grow, avoid=avoid, poll_s=poll_s,
                        what=what, fix=fix, queue_s=queue_s, events=events)


def _reserve(plan: Plan, *, timeout_s: float, name: str, can_grow: bool, avoid: set[str] | None, poll_s: float,
             what: str, fix: str, queue_s: float, events: nodes.AutoscalerEvents | None) -> PlacementGroup:
    start = time.monotonic()
    deadline, line_at = start + timeout_s, start + FIRST_LINE_S
    queued = said = False
    avoid = set(avoid) & nodes.alive() if avoid else set()  # a node Ray has declared dead is left out anyway
    avoid_s = min(AVOID_S, timeout_s / 2)
    try:
        pg, ready_ref = _group(plan, name, avoid)
    except TypeError:  # a Ray without bundle label selectors: nothing can be avoided
        log.warning("this Ray cannot keep a placement group off nodes; not avoiding %s", sorted(avoid))
        avoid = set()
        pg, ready_ref = _group(plan, name, avoid)
    try:
        while True:
            ready, _ = ray.wait([ready_ref], timeout=max(0.0, min(poll_s, deadline - time.monotonic())))
            if ready:
                if said:
                    log.warning("%s placed after %.0fs of waiting", what, time.monotonic() - start)
                return pg
            now = time.monotonic()
            if can_grow and (never := _never(plan, pg, events)):
                # (A request for what no node type of the cluster's autoscaler offers stays pending for ever.)
                raise PlacementError(f"{what} can never be placed on this cluster: its autoscaler can add no node "
                                     f"that can hold {_whose(plan)} of {fmt_resources(never)} (no node type it "
                                     f"has offers that, nor any node it has). {fix}", never=True)
            if now >= deadline or (queue_s and now >= line_at):
                why = _why(plan, pg)
                if now >= deadline:
                    if queued or not queue_s or not why.startswith(BUSY):
                        break
                    queued, deadline = True, start + timeout_s + queue_s  # (inf: no deadline)
                if now >= line_at:
                    line_at, said = now + QUEUE_LINE_S, True
                    log.warning("%s waits (%.0fs so far%s): %s", what, now - start,
                                "" if not queued else ", in the queue", why)
            if avoid and now - start >= avoid_s and avoid & nodes.alive():
                log.warning("node(s) %s still alive after %gs: no longer avoided", ", ".join(n[:12] for n in avoid),
                            avoid_s)
                remove_placement_group(pg)
                avoid = set()
                pg, ready_ref = _group(plan, name, avoid)
    except BaseException:
        release(pg)
        raise
    remove_placement_group(pg)
    waited = f"cluster.placement_timeout_s={timeout_s:g}s" + (
        f" and cluster.queue_timeout_s={queue_s:g}s in the queue" if queued else "")
    raise PlacementError(f"{what} not ready after {waited}: {_why(plan, pg)}. {fix}")


def _whose(plan: Plan) -> str:
    """What the autoscaler was asked for: a bundle, or a STRICT_PACK group's total (v1 asks for it as one)."""
    return "the group's total" if plan.placement_strategy == "STRICT_PACK" else "a bundle"


def _never(plan: Plan, pg: PlacementGroup, events: nodes.AutoscalerEvents | None) -> dict[str, float] | None:
    """A bundle of `pg` the cluster's autoscaler says it can add no node for: v2's autoscaling state names the
    group; v1's event names only the resources, matched to the plan's bundles (plan.unmet_bundle)."""
    if (gang := nodes.infeasible(pg.id.hex())):
        return gang[0]
    for request in events.heard() if events is not None else ():
        if (bundle := unmet_bundle(request, plan.bundles, plan.placement_strategy)) is not None:
            return bundle
    return None


def _why(plan: Plan, pg: PlacementGroup) -> str:
    """Why `plan`'s group (`pg`, pending) is not placed now: what the nodes lack (plan.shortfall), or, when they
    could hold it, what is free and who holds the rest (plan.busy, its line starting with BUSY)."""
    return shortfall(plan.bundles, plan.placement_strategy, nodes.totals()) or busy(
        total(plan.bundles), ray.available_resources(), holders(exclude=pg))


def holders(exclude: PlacementGroup | None = None) -> list[tuple[str, dict[str, float]]] | None:
    """The placement groups that hold resources now (Ray's placement group table: each group's "name", "state" and
    "bundles", raytf/_core/private_apis.py, PG_TABLE), but `exclude`: (name, what it holds); None when unknown."""
    skip = exclude.id.hex() if exclude is not None else None
    out = []
    try:
        for gid, g in ray.util.placement_group_table().items():
            if g["state"] != "CREATED" or gid == skip:
                continue
            out.append((g["name"], total(list(g["bundles"].values()))))
    except (KeyError, TypeError, AttributeError, ray.exceptions.RayError) as e:  # (a message's detail, never fatal)
        log.debug("placement group table: %s", e)
        return None
    return out


def capacity(bundles: list[dict[str, float]], strategy: str, *, avoid: set[str], timeout_s: float = 1.0) -> bool:
    """Whether `bundles` can be reserved now (elastic training's grow check): a placement group that is ready
    within `timeout_s`, released at once either way. `avoid`: nodes the bundles must not use (the running group's,
    under STRICT_SPREAD: a worker there would share a host)."""
    kwargs = avoiding(avoid, len(bundles))
    pg = placement_group(bundles, strategy=strategy, name="raytf:capacity-check", **kwargs)
    try:
        ready, _ = ray.wait([pg.ready()], timeout=timeout_s)
        return bool(ready)
    finally:
        remove_placement_group(pg)


def release(pg: PlacementGroup | None) -> None:
    if pg is None:
        return
    try:
        remove_placement_group(pg)
    except Exception as e:  # the group may already be gone with its cluster
        log.debug("removing placement group: %s", e)
