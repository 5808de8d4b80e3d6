"""A test bed of hosts on one machine: Linux network namespaces joined by a bridge, each host with its own
address in 198.18.0.0/24 (RFC 2544's benchmarking range: traffic never leaves this machine) and its own Ray
node, so a run spans several addresses and a host can fail the way real ones do.

Fault verbs: `partition(host)` / `heal(host)` (its link down / up: a real partition, TCP sees nothing),
`kill_host(host)` (every process in its namespace, by pid), `slow_link(host, delay_ms, rate)` (tc netem).
`close()` kills each namespace's processes by pid (`ip netns pids`), never `ray stop`, which would stop every
Ray on the machine (other test runs included), then removes the namespaces and the bridge; it runs even after a
failed test. One bed at a time per machine (a lock file): beds would share the subnet.

Ray 2.60 refuses a second node unless every `ray start` (and the driver) runs with RAY_AUTH_MODE=token; the
token lives in ~/.ray/auth_token, one file seen by every host here.
"""

from __future__ import annotations

import fcntl
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

SUBNET = "198.18.0"
BRIDGE_ADDRESS = f"{SUBNET}.1"  # the machine's own end of the bridge
GCS_PORT = 6379
_LOCK = "/tmp/raytf-hostbed.lock"
_RAY = [sys.executable, "-m", "ray.scripts.scripts"]


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


@dataclass(frozen=True)
class Host:
    name: str  # its network namespace
    address: str  # 198.18.0.N
    link: str  # its link's end on the bridge (in this machine's namespace): down = partitioned
    temp_dir: str  # its Ray node's --temp-dir
    cpus: float


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    out = subprocess.run(["ip", *args], capture_output=True, text=True)
    if check and out.returncode:
        raise RuntimeError(f"ip {' '.join(args)}: {out.stderr.strip()}")
    return out


class HostBed:
    """`HostBed([0, 2, 2])`: three hosts, the first the Ray head (here with 0 CPUs), each with the CPUs given.
    With `private_tmp`, every host but the head sees a /tmp of its own (a mount namespace), so a local path on
    the head is not on the others, as on separate machines."""

    def __init__(self, cpus: list[float], *, private_tmp: bool = False) -> None:
        tag = uuid.uuid4().hex[:5]
        self.bridge = f"rtfb{tag}"
        self.private_tmp = private_tmp
        # Outside /tmp: the hosts' Ray directories must survive a private /tmp.
        self.root = tempfile.mkdtemp(prefix="raytf-hosts-", dir="/var/tmp")
        self.hosts = [Host(f"rtf{tag}h{i}", f"{SUBNET}.{i + 2}", f"rtf{tag}v{i}", os.path.join(self.root, f"h{i}"), c)
                      for i, c in enumerate(cpus)]
        self._lock: int | None = None
        self._made: list[str] = []

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
        return {**env, "RAY_AUTH_MODE": "token", **extra}

    # -- making and unmaking -------------------------------------------------------------------
    def start(self) -> HostBed:
        self._lock = os.open(_LOCK, os.O_CREAT | os.O_RDWR, 0o600)
        fcntl.flock(self._lock, fcntl.LOCK_EX)  # a bed another test run holds is waited for
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
            self._ray_start(h)
        return self

    def _ray_start(self, h: Host) -> None:
        args = [*_RAY, "start", f"--node-ip-address={h.address}", f"--num-cpus={h.cpus:g}", "--num-gpus=0",
                f"--temp-dir={h.temp_dir}", "--disable-usage-stats", f'--resources={{"host{self.hosts.index(h)}": 1}}']
        args += ["--head", f"--port={GCS_PORT}", "--include-dashboard=true"] if h is self.head else \
                [f"--address={self.address}"]
        if self.private_tmp and h is not self.head:
            # Its Ray node (and every task it starts) lives in a mount namespace with an empty /tmp.
            args = ["unshare", "--mount", "--propagation", "private", "sh", "-c",
                    f"mount -t tmpfs raytf-private-tmp /tmp && exec {shlex.join(args)}"]
        out = self.exec(h, args, capture_output=True, text=True, timeout=180)
        if out.returncode:
            raise RuntimeError(f"ray start on {h.name} ({h.address}) failed:\n{out.stdout[-2000:]}{out.stderr[-2000:]}")

    def close(self) -> None:
        try:
            for h in self.hosts:
                if h.name in self._made:
                    self.kill_host(h)
                    # The pair goes with its root end; the namespace's own teardown can lag (lingering sockets).
                    _ip("link", "del", h.link, check=False)
                    _ip("netns", "del", h.name, check=False)
            if "bridge" in self._made:
                _ip("link", "del", self.bridge, check=False)
            shutil.rmtree(self.root, ignore_errors=True)
        finally:
            self._made = []
            if self._lock is not None:
                os.close(self._lock)  # releases the flock
                self._lock = None

    # -- running things on a host --------------------------------------------------------------
    def exec(self, h: Host, argv: list[str], **kwargs) -> subprocess.CompletedProcess:
        kwargs.setdefault("env", self.env())
        return subprocess.run(["ip", "netns", "exec", h.name, *argv], **kwargs)

    def popen(self, h: Host, argv: list[str], **kwargs) -> subprocess.Popen:
        kwargs.setdefault("env", self.env())
        return subprocess.Popen(["ip", "netns", "exec", h.name, *argv], **kwargs)

    def pids(self, h: Host) -> list[int]:
        out = _ip("netns", "pids", h.name, check=False)
        return [int(p) for p in out.stdout.split()]

    def processes(self, h: Host, pattern: str) -> list[int]:
        """Pids in the host whose command line matches `pattern` (Ray workers rename theirs "ray::Class...")."""
        found = []
        for pid in self.pids(h):
            try:
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:  # gone while we looked
                continue
            if re.search(pattern, cmdline):
                found.append(pid)
        return found

    def wait_gone(self, h: Host, pattern: str, timeout_s: float) -> list[int]:
        """The processes matching `pattern` still alive in `h` after up to `timeout_s` (each waited on by pidfd)."""
        import select

        deadline = time.monotonic() + timeout_s
        while True:
            left = self.processes(h, pattern)
            if not left or time.monotonic() >= deadline:
                return left
            fds = []
            for pid in left:
                try:
                    fds.append(os.pidfd_open(pid))
                except ProcessLookupError:
                    continue
            try:
                if fds:  # readable when one exits; the deadline bounds the wait
                    select.select(fds, [], [], min(5.0, max(0.0, deadline - time.monotonic())))
            finally:
                for fd in fds:
                    os.close(fd)

    # -- faults --------------------------------------------------------------------------------
    def partition(self, h: Host) -> None:
        """Cut the host off the network: its processes live on, nothing reaches them and they reach nothing."""
        _ip("link", "set", h.link, "down")

    def heal(self, h: Host) -> None:
        _ip("link", "set", h.link, "up")

    def kill_host(self, h: Host, timeout_s: float = 30.0) -> None:
        """SIGKILL every process in the host's namespace (a power cut), until none is left."""
        deadline = time.monotonic() + timeout_s
        while (pids := self.pids(h)) and time.monotonic() < deadline:
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            self.wait_gone(h, ".", min(2.0, max(0.0, deadline - time.monotonic())))

    def revive(self, h: Host) -> None:
        """A fresh Ray node on the host (after kill_host, or a partition after which Ray declared it dead)."""
        self.kill_host(h)
        self._ray_start(h)

    def slow_link(self, h: Host, delay_ms: float, rate: str = "1gbit") -> None:
        """Delay (and rate-limit) what the host sends and receives, on both ends of its link. Raises
        NetemUnavailable where the kernel has no netem qdisc (some sandboxed kernels)."""
        for cmd in (["tc", "qdisc", "replace", "dev", h.link], ["tc", "-n", h.name, "qdisc", "replace", "dev", "eth0"]):
            out = subprocess.run([*cmd, "root", "netem", "delay", f"{delay_ms}ms", "rate", rate], capture_output=True,
                                 text=True)
            if out.returncode:
                self.unshape(h)
                raise NetemUnavailable(f"tc netem on {h.name}: {out.stderr.strip()}")

    def unshape(self, h: Host) -> None:
        for cmd in (["tc", "qdisc", "del", "dev", h.link], ["tc", "-n", h.name, "qdisc", "del", "dev", "eth0"]):
            subprocess.run([*cmd, "root"], capture_output=True)  # nothing shaped: nothing to delete

    def reachable(self, src: Host, dst: Host, port: int = GCS_PORT, timeout_s: float = 2.0) -> bool:
        """Whether `src` can open a TCP connection to `dst` (the images have no ping)."""
        code = (f"import socket\ntry:\n    socket.create_connection(({dst.address!r}, {port}), timeout={timeout_s})"
                "\nexcept ConnectionRefusedError:\n    pass\nexcept OSError:\n    raise SystemExit(1)")
        return self.exec(src, [sys.executable, "-c", code], timeout=timeout_s + 30).returncode == 0
