"""The cluster's nodes as Ray reports them (`ray.nodes()`): which are alive, what each has. One place for the
question every part of the driver asks (placement, the teardown's sweeps, the standbys' release, the tf.data
service's restarts, the plan of an attached cluster). Imports Ray, never TensorFlow."""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Iterator

import ray

from raytf._core import private_apis as apis
from raytf._core.plan import never_request

log = logging.getLogger("raytf")


def alive() -> set[str]:
    """The ids of the nodes Ray counts alive."""
    return {n["NodeID"] for n in ray.nodes() if n.get("Alive")}


def is_alive(node_id: str) -> bool:
    """Whether Ray still counts `node_id` alive (a node lost is declared dead after a while: ~30-60 s)."""
    return bool(node_id) and node_id in alive()


def draining() -> dict[str, float | None]:
    """The nodes Ray is draining (a cloud's or KubeRay's spot preemption, an autoscaler's scale-down: `ray
    drain-node`), each with its deadline (epoch seconds; None: none given). Ray's own private call
    (raytf/_core/private_apis.py, DRAINING_NODES); {} without it."""
    if not apis.available(apis.DRAIN_NOTICES, log.warning):
        return {}
    try:
        return {node: (ms / 1000 if ms else None) for node, ms in ray._private.state.state.get_draining_nodes().items()}
    except ray.exceptions.RayError as e:  # (the GCS busy or gone: asked again at the next round)
        log.debug("draining nodes: %s", e)
        return {}
    except Exception as e:  # (changed, or not callable over this kind of connection: never the run's end)
        apis.SWITCHES.turn_off(apis.DRAINING_NODES, f"changed: {type(e).__name__}: {e}", log.warning)
        return {}


_gcs: dict[str, object] = {}  # GCS address -> its client (infeasible(): one per cluster this process joined)


def infeasible(pg_id: str) -> list[dict[str, float]] | None:
    """The bundles of placement group `pg_id` (hex) that Ray's autoscaler can add no node for, when it says so: its
    autoscaling state's infeasible gang requests (the v2 autoscaler's, KubeRay's; seen here within 0.2-0.4 s of the
    request on Ray's fake multi-node cluster). Ray's own private call (raytf/_core/private_apis.py, INFEASIBLE);
    None when nothing says it is (no autoscaler; the v1 autoscaler says it as an event: `AutoscalerEvents`)."""
    if not ray.is_initialized() or not apis.available(apis.INFEASIBLE_REQUESTS, log.warning):
        return None
    try:
        from ray.core.generated.autoscaler_pb2 import GetClusterStatusReply

        address = ray.get_runtime_context().gcs_address
        if address not in _gcs:
            _gcs[address] = ray._raylet.GcsClient(address=address)
        reply = GetClusterStatusReply.FromString(_gcs[address].get_cluster_status(timeout_s=2))
        for gang in reply.autoscaling_state.infeasible_gang_resource_requests:
            if gang.details.startswith(pg_id):  # ("<placement group id>:<strategy>|<state>")
                return [dict(r.resources_bundle) for r in gang.requests]
    except ray.exceptions.RayError as e:  # (the GCS busy: asked again at the next round)
        log.debug("cluster status: %s", e)
    except Exception as e:  # (changed: never the run's end)
        apis.SWITCHES.turn_off(apis.INFEASIBLE, f"changed: {type(e).__name__}: {e}", log.warning)
    return None


def totals() -> list[dict[str, float]]:
    """Each alive node's resources (what it has, not what is free)."""
    return list(resources().values())


def resources() -> dict[str, dict[str, float]]:
    """Each alive node's resources (what it has, not what is free), by id."""
    return {n["NodeID"]: dict(n["Resources"]) for n in ray.nodes() if n.get("Alive")}


class AutoscalerEvents:
    """The requests Ray's v1 autoscaler says no node type can fulfil, heard while this is open: its event lines,
    which Ray sends every driver over the GCS's log channel ("(autoscaler +Ns) Error: No available node types can
    fulfill resource request {...}" on the driver's terminal; within ~1 s of a request on Ray's fake multi-node
    cluster, then every 30 s). Open only while a placement group waits (`heard()`): the channel carries every
    worker's output too. A private API (raytf/_core/private_apis.py, LOG_SUBSCRIBER); without it nothing is heard
    (the request is waited for, as before)."""

    POLL_S = 0.5  # (how soon the listener sees it is closed)

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._heard: list[dict[str, float]] = []
        self._closed = threading.Event()

    def open(self) -> AutoscalerEvents:
        """Start listening, in a thread of its own: its subscription (~0.2 s the first time in a process) is made
        beside the placement group's request, which is not held up by it."""
        if not ray.is_initialized() or not apis.available(apis.INFEASIBLE_EVENTS, log.warning):
            return self
        try:
            address = ray.get_runtime_context().gcs_address
        except Exception as e:  # (a Ray Client connection, ray://: its GCS is not this process's to reach)
            log.debug("autoscaler events: %s", e)
            return self
        threading.Thread(target=self._listen, args=(address,), name="raytf-autoscaler-events", daemon=True).start()
        return self

    def _listen(self, address: str) -> None:
        try:
            subscriber = ray._raylet.GcsLogSubscriber(address=address)
            subscriber.subscribe()
        except (ray.exceptions.RayError, OSError) as e:  # (the GCS busy, unreachable: the wait goes on, unheard)
            log.debug("autoscaler events: %s", e)
            return
        except Exception as e:  # (changed: never the run's end)
            apis.SWITCHES.turn_off(apis.LOG_SUBSCRIBER, f"changed: {type(e).__name__}: {e}", log.warning)
            return
        try:
            while not self._closed.is_set():
                data = subscriber.poll(timeout=self.POLL_S)
                if not data:
                    continue
                if data.get("pid") != "autoscaler":
                    continue
                found = [r for line in data.get("lines", ()) if (r := never_request(line)) is not None]
                if found:
                    with self._lock:
                        self._heard.extend(found)
        except Exception as e:  # (the cluster gone, or the channel changed: nothing more is heard)
            log.debug("autoscaler events: %s", e)
        finally:
            subscriber.close()

    def heard(self) -> list[dict[str, float]]:
        """The never-requests heard so far (each a dict of resources)."""
        with self._lock:
            return list(self._heard)

    def close(self) -> None:
        """Stop listening. Not waited for (a placement that is ready at once would wait out the poll): the listener
        closes its subscriber within POLL_S."""
        self._closed.set()


@contextlib.contextmanager
def autoscaler_events() -> Iterator[AutoscalerEvents]:
    """An open AutoscalerEvents for the block."""
    events = AutoscalerEvents().open()
    try:
        yield events
    finally:
        events.close()
