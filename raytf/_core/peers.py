"""Did a task's program use the cluster raytf gave it? Read from the kernel's TCP table (/proc/net/tcp, tcp6), pure.

A script that builds a strategy which does not span the cluster (tf.distribute.MirroredStrategy ignores TF_CONFIG;
the ParameterServerStrategy tutorial's in-process test cluster trains on its own ports) runs as unsynchronised
copies and "succeeds". One that joined its cluster had a TCP connection with another task of it: a peer connected
to its TF server's port, or it connected to a peer's."""

from __future__ import annotations

import socket
from collections.abc import Iterable

ESTABLISHED = "01"  # the kernel's state code (include/net/tcp_states.h)
# A connection that was established once: open, or closing, or closed and kept in TIME_WAIT (~60 s after the side
# that closed first, the script's, exited). A short script's channels are gone before a twice-a-second look sees
# them open (raytf issue 71: a correct 10-step script was refused as not spanning its cluster): its closed ones
# still say it connected. Not SYN_SENT/SYN_RECV (never connected) nor LISTEN (the server's own port).
WAS_CONNECTED = frozenset({ESTABLISHED, "04", "05", "06", "07", "08", "09", "0B"})

Endpoint = tuple[str, int]  # (ip, port)


def _ip(hex_addr: str) -> str:
    """An address as /proc/net/tcp{,6} writes it: the bytes of each 32-bit word in host (little-endian) order."""
    raw = bytes.fromhex(hex_addr)
    raw = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
    if len(raw) == 4:
        return socket.inet_ntop(socket.AF_INET, raw)
    if raw[:12] == b"\0" * 10 + b"\xff\xff":  # IPv4-mapped (::ffff:a.b.c.d)
        return socket.inet_ntop(socket.AF_INET, raw[12:])
    return socket.inet_ntop(socket.AF_INET6, raw)


def connections(table: str) -> list[tuple[Endpoint, Endpoint]]:
    """The connections in a /proc/net/tcp (or tcp6) table that were established (WAS_CONNECTED), as (local, remote)
    endpoints."""
    out = []
    for line in table.splitlines()[1:]:
        fields = line.split()
        if len(fields) < 4 or fields[3] not in WAS_CONNECTED:
            continue
        try:
            (lip, lport), (rip, rport) = (f.split(":") for f in fields[1:3])
            out.append(((_ip(lip), int(lport, 16)), (_ip(rip), int(rport, 16))))
        except ValueError:  # a line of another format: not ours to judge
            continue
    return out


def joined(conns: Iterable[tuple[Endpoint, Endpoint]], own_port: int, peers: set[Endpoint]) -> bool:
    """Whether any connection is to this task's TF server port (from anyone: TF binds 0.0.0.0) or from here to
    another task of the cluster."""
    return any(local[1] == own_port or remote in peers for local, remote in conns)


def cluster_endpoints(tf_config: dict, resolve=socket.gethostbyname) -> tuple[int | None, set[Endpoint]]:
    """This task's port and its peers' (ip, port) from its TF_CONFIG; (None, set()) without a cluster of several
    tasks."""
    cluster, task = tf_config.get("cluster") or {}, tf_config.get("task") or {}
    own, peers = None, set()
    for role, addresses in cluster.items():
        for index, address in enumerate(addresses):
            host, _, port = address.rpartition(":")
            if role == task.get("type") and index == task.get("index"):
                own = int(port)
                continue
            try:
                peers.add((resolve(host.strip("[]")), int(port)))
            except OSError:  # a name this host cannot resolve: no connection to it can be seen either
                continue
    return (own, peers) if peers else (None, set())
