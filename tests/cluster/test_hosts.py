"""raytf on a network of hosts (tests/hosts.py): each host a network namespace with its own address and Ray
node; the driver runs `python -m raytf.launch` on the head host, as a user would on a real cluster. And the
The firewall recipe (docs/security.md): with cluster.port_range, one nftables rule set per node keeps TF's gRPC
servers (no authentication, no TLS) away from a machine outside the cluster, while the run trains across the
cluster's hosts as before."""

import json
import re
import shutil
import sys
import threading
import time

import pytest

from tests import hosts
from tests.cluster import hostrun

# CI's second step (-m slow), as every host-bed test: a bed starts 3-5 Ray nodes (~40 s).
pytestmark = [pytest.mark.timeout(600), pytest.mark.slow]

PORTS = (20000, 20009)


@pytest.fixture(scope="module")
def hostbed():
    # The head (driver, GCS, the run's event bus) with no CPUs for tasks; two hosts for the workers; and one host
    # on the same network without a Ray node: a machine outside the cluster (the firewall's).
    yield from hosts.bed_for_tests([0, 2, 2, None])


@pytest.fixture
def bed(hostbed):
    return hostbed.ready()  # (a host a fault left is revived for the test that uses it next)


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


def test_the_firewall_recipe_keeps_tfs_ports_from_a_host_outside_the_cluster(bed, tmp_path):
    if shutil.which("nft") is None:
        pytest.skip("`nft` (nftables) is not installed: the firewall recipe cannot be applied")
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
    assert all(f"{a}:{p}" in exposed[0] for a, p in servers) and exposed[0].endswith("(docs/security.md)")


def _check_two_node_yaml(bed, tmp_path, name: str, result: dict) -> None:
    """conf/two_node.yaml across hosts: each task on a host of its own with that host's address in every task's
    TF_CONFIG (not 127.0.0.1), the run's event bus on the driver's node, nothing left on the cluster."""
    tasks = {t["rank"]: t for t in result["tasks"]}
    addresses = {t["host"] for t in tasks.values()}
    assert len(addresses) == 2 and addresses <= {h.address for h in bed.hosts[1:]}  # STRICT_SPREAD: two hosts
    spec = sorted(t["address"] for t in tasks.values())
    for rank in (0, 1):
        log = (tmp_path / name / "logs" / f"worker{rank}-attempt1.log").read_text()
        tf_config = json.loads(re.search(r"TF_CONFIG (\{.*\})", log).group(1))
        assert sorted(tf_config["cluster"]["worker"]) == spec  # each task's own host:port, not 127.0.0.1
        assert tf_config["task"] == {"type": "worker", "index": rank}
    # The run's event bus ran on the driver's own node: a lost worker host cannot take it along.
    state = hostrun.cluster_state(bed, name)
    assert state["bus_nodes"] == [state["driver_node"]]
    assert (state["alive"], state["placement_groups"]) == ([], [])


def _fault_mid_run(bed, tmp_path, name: str, rank: int, fault, after):
    """A paced 2-worker run; once it has committed a checkpoint, `fault(victim)` on rank `rank`'s host; the run
    is left to finish; then `after(victim)` (still inside, e.g. a heal and its checks), and always the victim
    revived and the driver stopped. Returns (victim, the fault's time, exit code, result.json, the Launch)."""
    run = hostrun.Launch(bed, tmp_path, name, "cluster.placement_strategy=SPREAD", "train.epochs=3",
                 "train.steps_per_epoch=10", "train.params.step_s=0.2", "checkpoint.keep_last=0",
                 "failure.max_failures=2")
    victim = None
    try:
        workers = run.wait_for_workers(2)
        run.wait_for_commit()
        victim = bed.host_of(workers[rank])
        fault_at = time.time()
        fault(victim)
        code, result = run.finish()
        after(victim)
    finally:
        run.stop()
        if victim is not None:
            bed.heal(victim)
            bed.revive_before_next_use(victim)  # a fresh node in place of the lost one, for the next test
    return victim, fault_at, code, result, run


def _assert_finished_elsewhere(bed, tmp_path, name: str, victim, code: int, result: dict, run: hostrun.Launch) -> dict:
    """The run succeeded on the other hosts in a second attempt resumed from the last commit before it, and
    nothing of it is left on the cluster. Returns that attempt."""
    assert code == 0, run.output()
    assert result["status"] == "succeeded", result["error"]
    first, *rest = result["attempts"]
    assert first["status"] == "failed" and rest and rest[-1]["status"] == "succeeded", result["attempts"]
    # Resumed from the last commit before the failure: nothing lost beyond it.
    assert rest[0]["resumed_from"] == hostrun.last_commit_before(tmp_path, name, rest[0])
    assert {t["host"] for t in result["tasks"]} <= {h.address for h in bed.hosts if h is not victim}
    state = hostrun.cluster_state(bed, name)
    assert (state["alive"], state["placement_groups"]) == ([], [])
    return rest[0]


@pytest.mark.parametrize("rank", [1, 0])
def test_partitioned_worker_host_the_run_finishes_on_the_others(bed, tmp_path, rank):
    """Rank 1's host, or rank 0's (TF's coordination service, the chief's checkpoint copy)."""
    left = []

    def heal_and_look(victim) -> None:
        healed_at = time.monotonic()
        bed.heal(victim)
        # Healed, the cut-off host's Ray node learns it was declared dead and takes its workers down with it.
        left.extend(bed.wait_gone(victim, r"^ray::TaskActor", timeout_s=60))
        print(f"after heal: the run's processes on the cut-off host gone in {time.monotonic() - healed_at:.1f}s")

    victim, cut_at, code, result, run = _fault_mid_run(bed, tmp_path, "cut", rank, bed.partition, heal_and_look)
    assert left == []
    second = _assert_finished_elsewhere(bed, tmp_path, "cut", victim, code, result, run)
    epochs = [json.loads(p.read_text())["epoch"] for p in (tmp_path / "cut" / "checkpoints").glob("*/_COMMITTED.json")]
    assert max(epochs) == 3
    recovered_after = second["first_step_at"] - cut_at
    print(f"partition -> the next attempt's first step: {recovered_after:.1f}s "
          f"(recovery_s {second['recovery_s']}s after the failure was seen)")
    assert recovered_after < 150


@pytest.mark.parametrize("rank", [0, 1])
def test_killed_host_the_run_finishes_on_the_other(bed, tmp_path, rank):
    """Every process of rank 0's host (or rank 1's) SIGKILLed: a power cut."""
    victim, killed_at, code, result, run = _fault_mid_run(bed, tmp_path, "power", rank, bed.kill_host,
                                                          lambda victim: None)
    second = _assert_finished_elsewhere(bed, tmp_path, "power", victim, code, result, run)
    print(f"host killed -> the next attempt's first step: {second['first_step_at'] - killed_at:.1f}s")


@pytest.mark.parametrize("delay_ms", [2, 0], ids=["2ms-1gbit", "1gbit-only"])
def test_two_node_yaml_across_slow_links(bed, tmp_path, delay_ms):
    """conf/two_node.yaml across hosts (_check_two_node_yaml), on 2 ms each way and 1 Gbit/s on every host's link
    (tc netem): a LAN between racks, not one machine; or the rate alone (tc tbf), where the kernel has no netem.
    (Step time against the bare links: benchmarks.network.)"""
    try:
        for h in bed.hosts:
            bed.slow_link(h, delay_ms=delay_ms, rate="1gbit")
    except hosts.NetemUnavailable as e:
        pytest.skip(f"this kernel cannot delay links: {e}")
    try:
        assert bed.reachable(bed.hosts[1], bed.hosts[2])
        with hostrun.Launch(bed, tmp_path, "slow", "train.epochs=2", "train.steps_per_epoch=10",
                            "train.params.step_s=0") as run:
            code, result = run.finish()
    finally:
        for h in bed.hosts:
            bed.unshape(h)
    assert code == 0, run.output()
    assert result["status"] == "succeeded"
    _check_two_node_yaml(bed, tmp_path, "slow", result)
    print(f"slow links ({delay_ms} ms): first step after {result['first_step_s']}s, run {result['duration_s']}s")
