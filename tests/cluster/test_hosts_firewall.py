"""The README's firewall recipe (Security) on a network of hosts (tests/hosts.py): with cluster.port_range, one
nftables rule set per node keeps TF's gRPC servers (no authentication, no TLS) away from a machine outside the
cluster, while the run trains across the cluster's hosts as before."""

import shutil
import sys
import threading
import time

import pytest

from tests import hosts
from tests.cluster import hostrun

# CI's second step (-m slow), as every host-bed test: each starts 3-5 Ray nodes (~40 s a test).
pytestmark = [pytest.mark.timeout(600), pytest.mark.slow]

PORTS = (20000, 20009)


@pytest.fixture(scope="module")
def bed():
    if shutil.which("nft") is None:
        pytest.skip("`nft` (nftables) is not installed: the firewall recipe cannot be applied")
    # The head (driver, GCS) with no CPUs for tasks, two hosts for the workers, and one host on the same network
    # without a Ray node: a machine outside the cluster.
    yield from hosts.bed_for_tests([0, 2, 2, None])


_CONNECT = ("import socket, sys\n"
            "try:\n"
            "    socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=float(sys.argv[3])).close()\n"
            "    print('connected')\n"
            "except ConnectionRefusedError:\n"
            "    print('refused')\n"
            "except TimeoutError:\n"
            "    print('timeout')\n"
            "except OSError as e:\n"
            "    print(f'error: {e}')\n")


def _connect(bed: hosts.HostBed, src: hosts.Host, address: str, port: int, timeout_s: float = 3.0) -> str:
    """A TCP connect from `src` to address:port: 'connected', 'refused' (nothing listens), 'timeout' (dropped)."""
    out = bed.exec(src, [sys.executable, "-c", _CONNECT, address, str(port), str(timeout_s)], capture_output=True,
                   text=True, timeout=timeout_s + 60)
    return out.stdout.strip() or f"error: {out.stderr.strip()[-500:]}"


def _connect_all(bed: hosts.HostBed, probes: list[tuple[hosts.Host, str, int]]) -> list[str]:
    """The probes at once (each dropped one waits out its timeout)."""
    found = [""] * len(probes)

    def probe(i: int) -> None:
        found[i] = _connect(bed, *probes[i])

    threads = [threading.Thread(target=probe, args=(i,)) for i in range(len(probes))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return found


def test_the_recipe_keeps_tfs_ports_from_a_host_outside_the_cluster(bed, tmp_path):
    head, w1, w2, outside = bed.hosts
    cluster = [h.address for h in (head, w1, w2)]
    print(f"the recipe (nft -f), for {cluster} and cluster.port_range={list(PORTS)}:\n"
          f"{hosts.firewall_recipe(cluster, PORTS)}")
    try:
        for h in (w1, w2):
            bed.firewall(h, cluster, PORTS)
        with hostrun.Launch(bed, tmp_path, "fw", f"cluster.port_range=[{PORTS[0]},{PORTS[1]}]", "train.epochs=4",
                            "train.steps_per_epoch=10", "train.params.step_s=0.25") as run:
            run.wait_for_workers(2)
            servers = sorted((m.group(3), int(m.group(4))) for m in map(hostrun.TASK_ROW.match, run.lines) if m)
            assert {a for a, _ in servers} == {w1.address, w2.address}, run.output()
            # A cluster host reaches every server once TF listens (before, the held port refuses): the rule
            # admits the cluster's hosts.
            deadline = time.monotonic() + 180
            for address, port in servers:
                while (seen := _connect(bed, head, address, port)) == "refused" and time.monotonic() < deadline \
                        and run.proc.poll() is None:
                    pass  # each try is a process started on the head: paced enough
                assert seen == "connected", (address, port, seen, run.output())
            # The host outside the cluster: dropped, on both.
            assert _connect_all(bed, [(outside, a, p) for a, p in servers]) == ["timeout", "timeout"]
            # The control: without the rule, the same connect from outside gets through (the servers are still
            # up: the run is training).
            bed.unfirewall(w2)
            (address, port), = [s for s in servers if s[0] == w2.address]
            assert _connect(bed, outside, address, port) == "connected", run.output()
            assert run.proc.poll() is None, run.output()
            code, result = run.finish()
    finally:
        for h in (w1, w2):
            bed.unfirewall(h)
    assert code == 0, run.output()
    assert result["status"] == "succeeded", result.get("error")
    assert sorted((t["host"], t["port"]) for t in result["tasks"]) == servers
    assert all(PORTS[0] <= t["port"] <= PORTS[1] for t in result["tasks"]), result["tasks"]
    exposed = [line for line in run.lines if "TF's gRPC servers accept anyone who can reach them" in line]
    assert len(exposed) == 1, run.output()
    print(f"the driver's warning: {exposed[0]}")
    assert all(f"{a}:{p}" in exposed[0] for a, p in servers) and exposed[0].endswith("(README: Security)")
