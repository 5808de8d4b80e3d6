"""The TF servers' ports: the order a task tries `cluster.port_range` in, what it says when none is free, and the
warning that names what a run exposes (TF's gRPC servers listen on every interface, with no authentication and no
TLS, whatever TF_CONFIG says). Pure."""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence

from raytf._core import brief
from raytf._core.topology import CLUSTER_ROLES, TaskAddress
from raytf.config import SINGLE_TASK_STRATEGIES, Strategy


def candidates(low: int, high: int, start: int) -> list[int]:
    """Every port of [low, high] once, from the `start`-th on, wrapping around. Each task starts at a random
    offset, so the tasks of one host rarely try the same ports in the same order."""
    size = high - low + 1
    return [low + (start + i) % size for i in range(size)]


def none_free(port_range: Sequence[int], host: str) -> str:
    """Why a task holds no port: it tried every port of the range once, and all were taken on its host."""
    low, high = port_range
    return (f"cluster.port_range [{low}, {high}]: no free port on host {host} (tried all {high - low + 1}: other "
            "tasks of this or another run, or other programs, hold them). Fix: widen cluster.port_range, or place "
            "fewer tasks per host (cluster.placement_strategy=SPREAD or STRICT_SPREAD, more hosts)")


def taken_again(port: int, role: str, index: int, host: str) -> str:
    """Why a task started again at its address (TaskGroup.replace) holds no port: another process took its port."""
    return (f"{role} {index}: its port {port} on {host} was taken by another process, so it cannot start again at "
            "its address")


def is_loopback(host: str) -> bool:
    """127.x, ::1, localhost: reachable from this machine only."""
    bare = host.strip("[]")
    if bare.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(bare).is_loopback
    except ValueError:  # a host name: it resolves to whatever the network says
        return False


def exposure_warning(addresses: Sequence[TaskAddress], *, strategy: Strategy,
                     port_range: Sequence[int] | None) -> str | None:
    """The start-up warning naming the TF servers anyone on the network can reach, or None when there are none:
    a single-task strategy runs no server, the evaluator is no server of the cluster, and every address being
    loopback means one machine (embedded Ray)."""
    if strategy in SINGLE_TASK_STRATEGIES:
        return None
    served = [a for a in addresses if a.role in CLUSTER_ROLES]
    if all(is_loopback(a.host) for a in served):
        return None
    how = "docs/security.md" if port_range else \
          "cluster.port_range puts them in one range a firewall rule can cover; docs/security.md"
    return (f"TF's gRPC servers accept anyone who can reach them (no authentication, no TLS): "
            f"{brief.few(a.hostport for a in served)}; let only the cluster's hosts reach these ports ({how})")
