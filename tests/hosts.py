"""A test bed of hosts on one machine: Linux network namespaces joined by a bridge, each host with its own
address in 198.18.0.0/24 (RFC 2544's benchmarking range: traffic never leaves this machine) and its own Ray
node, so a run spans several addresses and a host can fail the way real ones do. Each host's processes also
live in a PID (and mount) namespace of their own: Ray finds "its" node by listing the raylets it can see, and on
one shared process table a driver started on any host would attach to the head's raylet (Ray prefers the head
among the raylets it sees: ray._private.services.get_node_to_connect_for_driver).

Fault verbs: `partition(host)` / `heal(host)` (its link down / up: a real partition, TCP sees nothing),
`kill_host(host)` (every process in its namespace, by pid), `slow_link(host, delay_ms, rate)` (tc netem; tc tbf
for a rate alone). `firewall(host, addresses, port_range)` / `unfirewall(host)`: docs/security.md's nftables recipe
for TF's ports (`firewall_recipe`), in the host's network namespace.
`close()` kills each namespace's processes by pid (`ip netns pids`), never `ray stop`, which would stop every
Ray on the machine (other test runs included), then removes the namespaces and the bridge; it runs even after a
failed test. One bed at a time per machine (a lock file): beds would share the subnet.

Ray 2.60 refuses a second node unless every `ray start` (and the driver) runs with RAY_AUTH_MODE=token; the
token lives in ~/.ray/auth_token, one file seen by every host here.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

SUBNET = "198.18.0"
BRIDGE_ADDRESS = f"{SUBNET}.1"  # the machine's own end of the bridge
GCS_PORT = 6379
_LOCK = "/tmp/raytf-hostbed.lock"
_LOCK_WAIT_S = 900.0  # another test run's bed, at most
_STALE_NS = re.compile(r"^rtf[0-9a-f]{5}h\d+$")
_STALE_LINK = re.compile(r"^(rtfb[0-9a-f]{5}|rtf[0-9a-f]{5}v\d+)(@\S+)?$")
_RAY = [sys.executable, "-m", "ray.scripts.scripts"]
_REPO = str(Path(__file__).resolve().parents[1])  # this checkout: its tasks import raytf, tests, examples from it
# How soon the head's GCS declares a cut-off node dead. Ray's defaults (a health check every 3 s, 10 s to answer,
# 5 failures) take ~65 s on a partition, where every check waits out its timeout (ray-project/ray#52945 spells the
# arithmetic out); 3 s to answer and a check every 2 s take ~25 s, still well after TF's own ~9 s and with 5
# misses in a row to be sure under load. What raytf does once a node is declared dead is what the tests check;
# the wait was most of a partition test (the PS worker host's: 77.8 -> 33.0 s from the cut to the next attempt's
# first step, the test 120 -> 75 s; CI's second step, issue 31). An operator may tune a real cluster the same way
# (the same variables, on the head).
# A bed made with `quick_verdict=False` keeps Ray's own.
_HEALTH_CHECK = {"RAY_health_check_timeout_ms": "3000", "RAY_health_check_period_ms": "2000",
                 "RAY_health_check_failure_threshold": "5"}


def unavailable() -> str | None:
    """Why this machine cannot make a bed (tests skip with it), or None."""
    if not sys.platform.startswith("linux"):
        return "network namespaces need Linux"
    if os.geteuid() != 0:
        return "network namespaces need root (CAP_NET_ADMIN)"
    for tool in ("ip", "tc"):
        if shutil.which(tool) is None:
            return f"`{tool}` (iproute2) is not installed"
    probe = f"rtfprobe{os.getpid()}"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if made.returncode:
        return f"cannot create a network namespace: {made.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return None


class NetemUnavailable(RuntimeError):
    """The kernel cannot shape a link (no sch_netem)."""


class BedUnavailable(RuntimeError):
    """This machine cannot have a bed now (the subnet is in use, another run holds the bed too long)."""


@dataclass(frozen=True)
class Host:
    name: str  # its network namespace
    address: str  # 198.18.0.N
    link: str  # its link's end on the bridge (in this machine's namespace): down = partitioned
    temp_dir: str  # its Ray node's --temp-dir
    cpus: float | None  # None: no Ray node (a machine on the network, outside the cluster)


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    out = subprocess.run(["ip", *args], capture_output=True, text=True)
    if check and out.returncode:
        raise RuntimeError(f"ip {' '.join(args)}: {out.stderr.strip()}")
    return out


class HostBed:
    """`HostBed([0, 2, 2])`: three hosts, the first the Ray head (here with 0 CPUs), each with the CPUs given; a
    host given None instead has no Ray node (on the network, outside the cluster: `HostBed([0, 2, 2, None])`).
    With `private_tmp`, every host but the head sees a /tmp of its own (a mount namespace), so a local path on
    the head is not on the others, as on separate machines. With `private_fs`, every host has a filesystem of its
    own as far as a run can tell (`_private_fs`): a /tmp and a Ray directory of its own, one directory shared by
    all (`shared`: the storage), one only the head sees (`head_only`: the user's project), and the repository
    checkout hidden on the other hosts but for what is installed from it."""

    def __init__(self, cpus: list[float | None], *, private_tmp: bool = False, private_fs: bool = False,
                 resources: list[dict[str, float]] | None = None, env: dict[str, str] | None = None,
                 quick_verdict: bool = True) -> None:
        """`resources`: custom Ray resources per host (besides `host<i>: 1`, which every host has), to pin roles
        to hosts (cluster.<role>.custom). `env`: variables for every process of the bed (its Ray nodes, and
        what `exec`/`popen` run on its hosts), such as Ray's own RAY_<setting>. `quick_verdict`: a cut-off node
        declared dead in ~25 s (_HEALTH_CHECK); False: Ray's own health check (~65 s)."""
        self.extra_env = dict(env or {})
        self.node_env = {**(_HEALTH_CHECK if quick_verdict else {}), **self.extra_env}  # (its Ray nodes')
        tag = uuid.uuid4().hex[:5]
        self.bridge = f"rtfb{tag}"
        self.private_tmp = private_tmp
        self.private_fs = private_fs
        # Outside /tmp: the hosts' Ray directories must survive a private /tmp.
        self.root = tempfile.mkdtemp(prefix="raytf-hosts-", dir="/var/tmp")
        self.shared = os.path.join(self.root, "shared")  # private_fs: the one directory every host sees (NFS)
        self.head_only = os.path.join(self.root, "head-only")  # private_fs: the head's alone
        os.makedirs(self.shared)
        os.makedirs(self.head_only)
        self.hosts = [Host(f"rtf{tag}h{i}", f"{SUBNET}.{i + 2}", f"rtf{tag}v{i}", os.path.join(self.root, f"h{i}"), c)
                      for i, c in enumerate(cpus)]
        self.resources = [{f"host{i}": 1.0, **((resources or [])[i] if i < len(resources or []) else {})}
                          for i in range(len(cpus))]
        self._lock: int | None = None
        self._made: list[str] = []
        # host name -> its `ray start --block` (the PID namespace's keeper) and the namespace's init, in this
        # machine's pid numbering
        self._keepers: dict[str, subprocess.Popen] = {}
        self._inits: dict[str, int] = {}
        self._to_revive: set[str] = set()  # hosts whose node starts again at the next ready()

    @property
    def head(self) -> Host:
        return self.hosts[0]

    @property
    def address(self) -> str:
        """The Ray cluster's address (the head's GCS)."""
        return f"{self.head.address}:{GCS_PORT}"

    def host_of(self, address: str) -> Host:
        return next(h for h in self.hosts if h.address == address.rpartition(":")[0] or h.address == address)

    def env(self, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_ADDRESS")}
        return {**env, "RAY_AUTH_MODE": "token", **self.extra_env, **extra}

    # -- making and unmaking -------------------------------------------------------------------
    def start(self) -> HostBed:
        """Make the hosts and start their Ray nodes; on any failure, what was made is removed again."""
        try:
            return self._start()
        except BaseException:
            self.close()
            raise

    def _start(self) -> HostBed:
        self._lock = os.open(_LOCK, os.O_CREAT | os.O_RDWR, 0o600)
        deadline = time.monotonic() + _LOCK_WAIT_S
        while True:  # a bed another test run holds is waited for, within bounds
            try:
                fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise BedUnavailable(f"another test run held {_LOCK} for {_LOCK_WAIT_S:g}s") from None
                time.sleep(1.0)  # polling another process's flock: no signal to wait on
        _remove_stale_beds()  # holding the lock, any bed still here was left by a run that was killed
        taken = _ip("-4", "route", "show").stdout
        if re.search(r"\b198\.1[89]\.", taken):
            raise BedUnavailable(f"198.18.0.0/15 is already routed on this machine ({taken.strip()[:200]})")
        _ip("link", "add", self.bridge, "type", "bridge")
        self._made.append("bridge")
        _ip("addr", "add", f"{BRIDGE_ADDRESS}/24", "dev", self.bridge)
        _ip("link", "set", self.bridge, "up")
        for h in self.hosts:
            _ip("netns", "add", h.name)
            self._made.append(h.name)
            _ip("link", "add", h.link, "type", "veth", "peer", "name", "eth0", "netns", h.name)
            _ip("link", "set", h.link, "master", self.bridge, "up")
            _ip("-n", h.name, "addr", "add", f"{h.address}/24", "dev", "eth0")
            _ip("-n", h.name, "link", "set", "eth0", "up")
            _ip("-n", h.name, "link", "set", "lo", "up")
            os.makedirs(h.temp_dir, exist_ok=True)
        for h in self.hosts:
            if h.cpus is not None:
                self._ray_start(h)
        return self

    def _ray_start(self, h: Host, timeout_s: float = 180.0) -> None:
        """Start the host's Ray node with `--block` as the first process of a PID namespace of its own: it lives
        as long as the node does, and when it goes (killed, or the node lost) every process of the host goes
        with it, as with a machine."""
        args = [*_RAY, "start", "--block", f"--node-ip-address={h.address}", f"--num-cpus={h.cpus:g}",
                "--num-gpus=0", f"--temp-dir={h.temp_dir}", "--disable-usage-stats",
                f"--resources={json.dumps(self.resources[self.hosts.index(h)])}"]
        args += ["--head", f"--port={GCS_PORT}", "--include-dashboard=true"] if h is self.head else \
                [f"--address={self.address}"]
        # With a private /tmp, its Ray node (and every task it starts) sees an empty /tmp of its own.
        tmp = self._private_tmp(h) if self.private_tmp and h is not self.head else ""
        tmp = self._private_fs(h) if self.private_fs else tmp
        log_path = os.path.join(self.root, f"{h.name}-ray.log")
        self._reap(h)
        keeper = subprocess.Popen(
            ["ip", "netns", "exec", h.name, "unshare", "--pid", "--fork", "--kill-child", "--mount-proc",
             "--propagation", "private", "sh", "-c", f"{tmp}exec {shlex.join(args)}"],
            env=self.env(**self.node_env), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        self._keepers[h.name] = keeper
        # Its output, copied to the log for as long as it runs (the pipe must never fill), says when the node
        # is up: that line, or the end of the output (it failed), is the signal waited for.
        up, settled = threading.Event(), threading.Event()

        def copy_output() -> None:
            with open(log_path, "wb") as log:
                for line in keeper.stdout:
                    log.write(line)
                    log.flush()
                    if b"Ray runtime started" in line:
                        up.set()
                        settled.set()
            settled.set()  # the output ended: it failed (or, once up, the node went)

        threading.Thread(target=copy_output, name=f"hostbed-{h.name}", daemon=True).start()
        if not settled.wait(timeout_s) or not up.is_set():
            tail = Path(log_path).read_text(errors="replace")[-3000:]
            raise RuntimeError(f"ray start on {h.name} ({h.address}) failed or timed out:\n{tail}")
        children = Path(f"/proc/{keeper.pid}/task/{keeper.pid}/children").read_text().split()
        self._inits[h.name] = int(children[0])  # unshare's one child: pid 1 of the host's namespace

    def _private_tmp(self, h: Host) -> str:
        """Shell commands that give the host an empty /tmp of its own, except the code this test run imports
        (a checkout or installed package under /tmp, as a CI's clone may be): bound back in at its own path."""
        keep = sorted({p for p in (_REPO, *_interpreter()) if p and (p == "/tmp" or p.startswith("/tmp/"))
                       and os.path.isdir(p) and p != "/tmp"})
        cmds = []
        for i, path in enumerate(keep):
            stage = os.path.join(self.root, f"{h.name}-keep{i}")
            os.makedirs(stage, exist_ok=True)
            cmds.append(f"mount --bind {shlex.quote(path)} {shlex.quote(stage)}")
        cmds.append("mount -t tmpfs raytf-private-tmp /tmp")
        for i, path in enumerate(keep):
            stage = os.path.join(self.root, f"{h.name}-keep{i}")
            cmds.append(f"mkdir -p {shlex.quote(path)} && mount --bind {shlex.quote(stage)} {shlex.quote(path)}")
        return " && ".join(cmds) + " && "

    def _private_fs(self, h: Host) -> str:
        """Shell commands that give the host a filesystem of its own, as a separate machine has: an empty /tmp
        (but the code this test run imports from there), and of the bed's directory only its own Ray directory (where
        Ray unpacks a job's working_dir for it), `shared`, and on the head `head_only`. On the other hosts the
        repository checkout is hidden too, except what is installed from it (the raytf package of an editable
        install, a virtual environment): the installed packages are the same on every node, the user's files are
        not. Each kept path is bound to a stage outside what is hidden first, and back once it is hidden."""
        head = h is self.head
        repo_in_tmp = _under(_REPO, "/tmp")
        hide_repo = not head and not repo_in_tmp
        tmp_code = sorted({p for p in (_REPO, *_interpreter()) if p and _under(p, "/tmp") and p != "/tmp" and
                           os.path.isdir(p) and not (not head and _under(p, _REPO))})
        keep = [*tmp_code, *(_installed_in_repo() if not head else []), h.temp_dir, self.shared,
                *([self.head_only] if head else [])]
        keep = [p for i, p in enumerate(keep) if not any(_under(p, q) for q in keep[:i])]  # nested: the outer one
        hide = ["/tmp", *([_REPO] if hide_repo else []), self.root]
        stage = os.path.join(f"{self.root}-stage", h.name)
        cmds = []
        for i, path in enumerate(keep):
            os.makedirs(os.path.join(stage, str(i)), exist_ok=True)
            cmds.append(f"mount --bind {shlex.quote(path)} {shlex.quote(os.path.join(stage, str(i)))}")
        cmds += [f"mkdir -p {shlex.quote(d)} && mount -t tmpfs raytf-private {shlex.quote(d)}" for d in hide]
        for i, path in enumerate(keep):
            cmds.append(f"mkdir -p {shlex.quote(path)} && "
                        f"mount --bind {shlex.quote(os.path.join(stage, str(i)))} {shlex.quote(path)}")
        # Started from /: a node's processes must not reach hidden files through a current directory they inherit.
        return " && ".join([*cmds, "cd /"]) + " && "

    def _reap(self, h: Host) -> None:
        keeper = self._keepers.pop(h.name, None)
        self._inits.pop(h.name, None)
        if keeper is not None:
            try:
                keeper.wait(30)
            except subprocess.TimeoutExpired:
                keeper.kill()
                keeper.wait(30)

    def close(self) -> None:
        """Everything the bed made goes, each step tried even if an earlier one failed."""
        try:
            for h in self.hosts:
                if h.name in self._made:
                    try:
                        _remove_host(h.name, h.link)
                        self._reap(h)
                    except Exception as e:  # go on with the others: leave as little behind as possible
                        print(f"hosts: could not remove {h.name}: {e}", file=sys.stderr)
            if "bridge" in self._made:
                _ip("link", "del", self.bridge, check=False)
            shutil.rmtree(self.root, ignore_errors=True)
            shutil.rmtree(f"{self.root}-stage", ignore_errors=True)
        finally:
            self._made = []
            if self._lock is not None:
                os.close(self._lock)  # releases the flock
                self._lock = None

    # -- running things on a host --------------------------------------------------------------
    def _enter(self, h: Host, cwd: str | None) -> list[str]:
        """The command prefix that runs a program on `h`: in its network, PID and mount namespaces once its
        node is up (so Ray there sees that node alone), in its network namespace before. (nsenter into a mount
        namespace starts at its root unless given a directory.)"""
        init = self._inits.get(h.name)
        if init is None:
            return ["ip", "netns", "exec", h.name]
        return ["nsenter", "-t", str(init), "--net", "--pid", "--mount", f"--wd={cwd or os.getcwd()}", "--"]

    def exec(self, h: Host, argv: list[str], **kwargs) -> subprocess.CompletedProcess:
        kwargs.setdefault("env", self.env())
        return subprocess.run([*self._enter(h, kwargs.get("cwd")), *argv], **kwargs)

    def popen(self, h: Host, argv: list[str], **kwargs) -> subprocess.Popen:
        kwargs.setdefault("env", self.env())
        return subprocess.Popen([*self._enter(h, kwargs.get("cwd")), *argv], **kwargs)

    def pids(self, h: Host) -> list[int]:
        return _pids(h.name)

    def processes(self, h: Host, pattern: str) -> list[int]:
        """Pids in the host whose command line matches `pattern` (Ray workers rename theirs "ray::Class...")."""
        return _processes(h.name, pattern)

    def wait_gone(self, h: Host, pattern: str, timeout_s: float) -> list[int]:
        """The processes matching `pattern` still alive in `h` after up to `timeout_s` (each waited on by pidfd)."""
        return _wait_gone(h.name, pattern, timeout_s)

    # -- faults --------------------------------------------------------------------------------
    def partition(self, h: Host) -> None:
        """Cut the host off the network: its processes live on, nothing reaches them and they reach nothing."""
        _ip("link", "set", h.link, "down")

    def heal(self, h: Host) -> None:
        _ip("link", "set", h.link, "up")

    def kill_host(self, h: Host, timeout_s: float = 30.0) -> None:
        """SIGKILL every process in the host's namespace (a power cut), until none is left."""
        _kill_namespace(h.name, timeout_s)
        self._reap(h)

    def revive(self, h: Host) -> None:
        """A fresh Ray node on the host (after kill_host, or a partition after which Ray declared it dead)."""
        self._to_revive.discard(h.name)
        self.kill_host(h)
        self._ray_start(h)

    def revive_before_next_use(self, h: Host) -> None:
        """The host's remains killed now, its fresh Ray node started when the bed is next asked for (`ready()`, a
        test's start): after a module's last fault nothing waits for a node no test will use (~15 s a revive)."""
        self.kill_host(h)
        self._to_revive.add(h.name)

    def ready(self) -> HostBed:
        """Every host a fault left to revive has its fresh node again."""
        for h in self.hosts:
            if h.name in self._to_revive:
                self.revive(h)
        return self

    def slow_link(self, h: Host, delay_ms: float, rate: str = "1gbit") -> None:
        """Delay and rate-limit what the host sends and receives, on both ends of its link (tc netem). With
        `delay_ms=0`, the rate alone (tc tbf: in kernels that have no netem, as some sandboxed ones). Raises
        NetemUnavailable where a delay is asked for and the kernel has no netem qdisc."""
        qdisc = ["netem", "delay", f"{delay_ms}ms", "rate", rate] if delay_ms else \
                ["tbf", "rate", rate, "burst", "256kb", "latency", "50ms"]
        for cmd in (["tc", "qdisc", "replace", "dev", h.link], ["tc", "-n", h.name, "qdisc", "replace", "dev", "eth0"]):
            out = subprocess.run([*cmd, "root", *qdisc], capture_output=True, text=True)
            if out.returncode:
                self.unshape(h)
                if delay_ms:
                    raise NetemUnavailable(f"tc netem on {h.name}: {out.stderr.strip()}")
                raise RuntimeError(f"tc tbf on {h.name}: {out.stderr.strip()}")

    def unshape(self, h: Host) -> None:
        for cmd in (["tc", "qdisc", "del", "dev", h.link], ["tc", "-n", h.name, "qdisc", "del", "dev", "eth0"]):
            subprocess.run([*cmd, "root"], capture_output=True)  # nothing shaped: nothing to delete

    def firewall(self, h: Host, addresses: Sequence[str], port_range: tuple[int, int]) -> str:
        """Apply `firewall_recipe(addresses, port_range)` on the host (its network namespace's own rule set, which
        goes with the namespace); returns the recipe."""
        recipe = firewall_recipe(addresses, port_range)
        out = subprocess.run(["ip", "netns", "exec", h.name, "nft", "-f", "-"], input=recipe, capture_output=True,
                             text=True)
        if out.returncode:
            raise RuntimeError(f"nft -f on {h.name}: {out.stderr.strip()}\n{recipe}")
        return recipe

    def unfirewall(self, h: Host) -> None:
        """Remove the recipe's table from the host (none there: nothing to remove)."""
        subprocess.run(["ip", "netns", "exec", h.name, "nft", "delete", "table", "inet", "raytf"], capture_output=True)

    def reachable(self, src: Host, dst: Host, port: int = GCS_PORT, timeout_s: float = 2.0) -> bool:
        """Whether `src` can open a TCP connection to `dst` (the images have no ping)."""
        code = (f"import socket\ntry:\n    socket.create_connection(({dst.address!r}, {port}), timeout={timeout_s})"
                "\nexcept ConnectionRefusedError:\n    pass\nexcept OSError:\n    raise SystemExit(1)")
        return self.exec(src, [sys.executable, "-c", code], timeout=timeout_s + 30).returncode == 0


def _under(path: str, parent: str) -> bool:
    return path == parent or path.startswith(parent.rstrip("/") + "/")


def _interpreter() -> list[str]:
    """Where this test run's Python lives: its import path and its environment (a virtual environment's `bin/`
    is on no import path, yet every host starts Ray with its `python`: a CI's venv under /tmp was hidden)."""
    return [*sys.path, sys.prefix, os.path.dirname(sys.executable)]


def _installed_in_repo() -> list[str]:
    """What of the repository checkout is installed, not the user's: the raytf package an editable install maps
    there and a virtual environment inside it (this interpreter's)."""
    import importlib.util

    spec = importlib.util.find_spec("raytf")
    found = [*(spec.submodule_search_locations or [] if spec else []), sys.prefix]
    return sorted({os.path.realpath(p) for p in found if _under(os.path.realpath(p), _REPO)})


def firewall_recipe(addresses: Sequence[str], port_range: tuple[int, int]) -> str:
    """The nftables rule set docs/security.md shows, for every node of a cluster whose TF tasks hold their
    ports in `port_range` (cluster.port_range): TCP to those ports only from the cluster's hosts (`addresses`),
    from the node itself over loopback, and replies to the node's own connections (one may get a local port in
    the range); everyone else's packets are dropped, so a connect from outside times out. `nft -f <file>` applies
    it; applied again (new hosts), it replaces the table."""
    low, high = port_range
    v4 = [a for a in addresses if ":" not in a]
    v6 = [a for a in addresses if ":" in a]
    lines = [
        "# raytf: TF's gRPC servers (no authentication, no TLS) only for the cluster's own hosts.",
        "# On every node: nft -f raytf.nft",
        f"define tf_ports = {low}-{high}  # cluster.port_range",
        *([f"define cluster_hosts = {{ {', '.join(v4)} }}"] if v4 else []),
        *([f"define cluster_hosts6 = {{ {', '.join(v6)} }}"] if v6 else []),
        "",
        "# Create the table if it is missing, so that applying the file again replaces it.",
        "table inet raytf",
        "delete table inet raytf",
        "table inet raytf {",
        "    chain input {",
        "        type filter hook input priority 0; policy accept;",
        "        tcp dport $tf_ports ct state established,related accept",
        '        tcp dport $tf_ports iifname "lo" accept',
        *(["        tcp dport $tf_ports ip saddr $cluster_hosts accept"] if v4 else []),
        *(["        tcp dport $tf_ports ip6 saddr $cluster_hosts6 accept"] if v6 else []),
        "        tcp dport $tf_ports drop",
        "    }",
        "}",
    ]
    return "\n".join(lines) + "\n"


def bed_for_tests(cpus: list[float | None], **kwargs):
    """A started bed for a pytest fixture (`yield from bed_for_tests([0, 2, 2])`): skips where this machine cannot
    make one; closed afterwards, whatever the tests did."""
    import pytest

    why = unavailable()
    if why:
        pytest.skip(why)
    bed = HostBed(cpus, **kwargs)
    try:
        bed.start()
    except BedUnavailable as e:
        pytest.skip(str(e))
    try:
        yield bed
    finally:
        bed.close()


def _pids(ns: str) -> list[int]:
    return [int(p) for p in _ip("netns", "pids", ns, check=False).stdout.split()]


def _processes(ns: str, pattern: str) -> list[int]:
    found = []
    for pid in _pids(ns):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:  # gone while we looked
            continue
        if re.search(pattern, cmdline):
            found.append(pid)
    return found


def _wait_gone(ns: str, pattern: str, timeout_s: float) -> list[int]:
    import select

    deadline = time.monotonic() + timeout_s
    while True:
        left = _processes(ns, pattern)
        if not left or time.monotonic() >= deadline:
            return left
        fds = []
        for pid in left:
            try:
                fds.append(os.pidfd_open(pid))
            except OSError:  # gone already, or a kernel without pidfds (then the select below polls)
                continue
        try:
            # Readable when one exits; without pidfds a short poll. The deadline bounds the wait.
            select.select(fds, [], [], min(5.0 if fds else 0.2, max(0.0, deadline - time.monotonic())))
        finally:
            for fd in fds:
                os.close(fd)


def _kill_namespace(ns: str, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while (pids := _pids(ns)) and time.monotonic() < deadline:
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        _wait_gone(ns, ".", min(2.0, max(0.0, deadline - time.monotonic())))


def _remove_host(ns: str, link: str) -> None:
    """Kill every process in namespace `ns`, then remove it and its link, whatever fails on the way."""
    try:
        _kill_namespace(ns)
    finally:
        # The pair goes with its root end; the namespace's own teardown can lag (lingering sockets).
        _ip("link", "del", link, check=False)
        _ip("netns", "del", ns, check=False)


def _remove_stale_beds() -> None:
    """Namespaces, links and bridges of beds whose test run was killed before it could close them."""
    for line in _ip("netns", "list", check=False).stdout.splitlines():
        ns = line.split()[0] if line.split() else ""
        if _STALE_NS.match(ns):
            _remove_host(ns, f"{ns[:8]}v{ns[9:]}")  # rtf<tag>h<i> -> rtf<tag>v<i>
    for line in _ip("-o", "link", "show", check=False).stdout.splitlines():
        parts = line.split(":")
        name = parts[1].strip().split("@")[0] if len(parts) > 1 else ""
        if _STALE_LINK.match(name):
            _ip("link", "del", name, check=False)
