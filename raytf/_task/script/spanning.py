"""Script mode, the host's side: whether the script's strategy spans the cluster raytf gave it. A script that builds
tf.distribute.MirroredStrategy (it ignores TF_CONFIG), or the ParameterServerStrategy tutorial's in-process test
cluster, trains as unsynchronised copies on every task: seen in the replicas its Model.fit reports, and in the
kernel's TCP tables (a task of the cluster holds a connection with another)."""

from __future__ import annotations

import os
import threading
from pathlib import Path

from raytf._core import peers
from raytf._core.plan import TaskSpec
from raytf.config import Config, Strategy
from raytf.errors import RaytfError

_POLL_S = 0.5  # how often the kernel's TCP tables are read while the script has not joined its cluster
_TCP_TABLES = ("/proc/net/tcp", "/proc/net/tcp6")


class ClusterNotUsed(RaytfError):
    """The script's strategy does not span the cluster raytf gave it: a bug in the script, never retried."""


class SpanWatch:
    """One task's script against its cluster (`tf_config`: the task's TF_CONFIG, None without a cluster)."""

    def __init__(self, cfg: Config, spec: TaskSpec, tf_config: dict | None) -> None:
        self.cfg, self.spec = cfg, spec
        # This task's port and its peers', from TF_CONFIG.
        self._cluster: tuple[int | None, set] = peers.cluster_endpoints(tf_config) if tf_config else (None, set())
        self.joined: bool | None = None  # a connection with another task of its cluster seen (None: not known)

    @property
    def has_cluster(self) -> bool:
        return self._cluster[0] is not None

    def look(self) -> bool | None:
        """Whether the kernel's TCP tables show a connection with the cluster now (None: they cannot be read)."""
        own_port, others = self._cluster
        try:
            tables = [Path(f).read_text() for f in _TCP_TABLES if os.path.exists(f)]
        except OSError:
            tables = []
        if own_port is None or not tables:  # no cluster; not Linux, or no /proc: nothing can be said
            return None
        self.joined = self.joined or any(peers.joined(peers.connections(t), own_port, others) for t in tables)
        return self.joined

    def watch(self, done: threading.Event) -> None:
        """Until the script ends (`done`) or is seen connected to its cluster, twice a second (a training script's
        TF channels stay open while it trains)."""
        while self.look() is False and not done.wait(_POLL_S):
            pass

    def at_fit(self, replicas: int) -> ClusterNotUsed | None:
        """The error for a Model.fit that started with `replicas` in sync, if it does not span the cluster."""
        workers = self.cfg.cluster.num_workers
        if self.cfg.cluster.strategy is Strategy.multi_worker_mirrored and replicas < workers:
            return self.error(f"trains with {replicas} replica(s) in sync on a cluster of {workers} workers")
        if self.look() is False:
            # A strategy of the cluster has connected to it by the time Model.fit runs (MWMS: to the coordination
            # service at its construction; ParameterServerStrategy: to the ps and workers).
            return self.error("started Model.fit without a connection to another task of its cluster")
        return None

    def at_exit(self) -> ClusterNotUsed | None:
        """The error for a script that exited 0, if it never connected to its cluster."""
        if self.joined is False:
            self.look()  # (once more, after its end: its closed connections are in TIME_WAIT for a minute)
        return self.error("never connected to another task of its cluster") if self.joined is False else None

    def error(self, what: str) -> ClusterNotUsed:
        c = self.cfg.cluster
        return ClusterNotUsed(
            f"{self.spec.role} {self.spec.index}: the script {what}: its strategy does not span the cluster, so its "
            f"tasks trained as unsynchronised copies (tf.distribute.MirroredStrategy ignores TF_CONFIG; an "
            f"in-process test cluster trains on its own). Fix: build tf.distribute.MultiWorkerMirroredStrategy() "
            f"(ParameterServerStrategy from TFConfigClusterResolver() for cluster.strategy=parameter_server), or "
            f"run it as one task: cluster.num_workers=1 (cluster.strategy=mirrored for one machine's GPUs; "
            f"now: cluster.strategy={c.strategy.value}, cluster.num_workers={c.num_workers})")
