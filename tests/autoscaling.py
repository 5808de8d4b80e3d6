"""A Ray cluster with an autoscaler on this machine: Ray's fake multi-node provider (`RAY_FAKE_CLUSTER=1`), whose
"nodes" are raylets the autoscaler starts here when a request needs one (tests/cluster/test_autoscaler.py).

Never `ray stop`, nor `ray.cluster_utils.AutoscalingCluster.start()/shutdown()`, which run `ray stop --force` and
end every Ray on the machine. The head is `ray start --head --block` in a session of its own (its GCS, autoscaler,
raylet; the fake nodes the autoscaler starts are its children), and `stop()` kills that session's processes by
pid, nothing else. What was found setting it up (Ray 2.60), and so is set here:
- Ray has two autoscalers: v2 (`RAY_enable_autoscaler_v2=1`, KubeRay's opt-in) reports a request no node type can
  hold in the GCS's autoscaling state; v1 (the default of `ray up` clusters, and of KubeRay unless configured) says
  it only as an event it sends every driver (`FakeAutoscaler(..., version=1)`);
- the wheel lacks fake_multi_node/example.yaml, which v2 reads for the `fake_multinode` provider type's defaults:
  the provider is given as `external` with the fake provider's class;
- `--node-ip-address=127.0.0.1` is rewritten to the machine's address unless RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0;
- a fake node without `object_store_memory` takes 30 % of the machine's memory;
- the token is the cluster's own (RAY_AUTH_TOKEN in the environment of its processes and of its clients), never
  ~/.ray/auth_token, which is the test session's.
The fake nodes share the head's temp dir: runs on it use `ray.ship_code=off` (the brief: a node's shipped
working_dir can be collected under another's task)."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

FAKE_HEAD_NODE_ID = "f" * 51 + "00000"
HEAD_TYPE = "ray.head.default"
_RAY = [sys.executable, "-m", "ray.scripts.scripts"]  # (the environment's own ray, whatever PATH holds)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _session_of(pid: int) -> int | None:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return int(fields[3]) if fields[0] != "Z" else None  # (after the state: ppid, pgrp, session)


class FakeAutoscaler:
    """`FakeAutoscaler({"cpu2": {"resources": {"CPU": 2}, "max_workers": 1}}).start()`: a head with no CPUs and
    an autoscaler (`version` 2 or 1) that may add nodes of the types given; `address` and `env()` are what a client
    needs."""

    def __init__(self, node_types: dict[str, dict], version: int = 2) -> None:
        if version not in (1, 2):
            raise ValueError(f"version={version!r}: Ray's autoscalers are 1 and 2")
        self.version = version
        self.token = secrets.token_hex(32)
        self.temp_dir = tempfile.mkdtemp(prefix="rtf-autoscaler-")
        self.port = _free_port()
        self.address = f"127.0.0.1:{self.port}"
        types = {name: {"node_config": {}, "min_workers": 0, "max_workers": 1, **t,
                        "resources": {"object_store_memory": 100 << 20, **t["resources"]}}
                 for name, t in node_types.items()}
        types[HEAD_TYPE] = {"resources": {"CPU": 0}, "node_config": {}, "max_workers": 0}
        self.config = {
            "cluster_name": "raytf-fake", "max_workers": sum(t["max_workers"] for t in node_types.values()),
            "upscaling_speed": 1.0, "idle_timeout_minutes": 1.0, "available_node_types": types,
            "head_node_type": HEAD_TYPE, "provider": {
                "type": "external", "module": "ray.autoscaler._private.fake_multi_node.node_provider."
                                              "FakeMultiNodeProvider",
                "gcs_address": self.address, "use_node_id_as_ip": True, "disable_node_updaters": True,
                "disable_launch_config_check": True, "launch_multiple": True, "head_node_id": FAKE_HEAD_NODE_ID},
            **{k: [] for k in ("initialization_commands", "setup_commands", "head_setup_commands",
                               "worker_setup_commands", "head_start_ray_commands", "worker_start_ray_commands",
                               "cluster_synced_files", "rsync_exclude", "rsync_filter")},
            "auth": {}, "docker": {}, "file_mounts": {}, "file_mounts_sync_continuously": False}
        self.proc: subprocess.Popen | None = None

    def env(self) -> dict[str, str]:
        """A client's environment (a driver, `ray status`): the cluster's token, and addresses kept on 127.0.0.1."""
        env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "RAY_AUTH_TOKEN_PATH")}
        return {**env, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": self.token,
                "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}

    def start(self, timeout_s: float = 120.0) -> FakeAutoscaler:
        config = Path(self.temp_dir) / "autoscaling.json"
        config.write_text(json.dumps(self.config))
        log = Path(self.temp_dir) / "head.log"
        env = {**self.env(), "RAY_FAKE_CLUSTER": "1", "AUTOSCALER_UPDATE_INTERVAL_S": "1",
               "RAY_enable_autoscaler_v2": "1" if self.version == 2 else "0",
               "RAY_CLOUD_INSTANCE_ID": FAKE_HEAD_NODE_ID,
               "RAY_OVERRIDE_NODE_ID_FOR_TESTING": FAKE_HEAD_NODE_ID, "RAY_NODE_TYPE_NAME": HEAD_TYPE,
               "RAY_USAGE_STATS_ENABLED": "0"}
        with open(log, "wb") as out:
            self.proc = subprocess.Popen(
                [*_RAY, "start", "--head", "--block", f"--autoscaling-config={config}", f"--port={self.port}",
                 "--node-ip-address=127.0.0.1", f"--temp-dir={self.temp_dir}", "--disable-usage-stats",
                 "--num-cpus=0", "--num-gpus=0", f"--object-store-memory={100 << 20}", "--include-dashboard=false",
                 "--dashboard-host=127.0.0.1", f"--dashboard-port={_free_port()}",
                 f"--ray-client-server-port={_free_port()}", "--dashboard-agent-listen-port=0"],
                env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + timeout_s
        try:
            while b"Ray runtime started" not in log.read_bytes():  # (its own line: the head is up)
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"the fake autoscaling cluster did not start:\n{log.read_text()[-3000:]}")
                time.sleep(0.2)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Kill every process of the head's session (the fake nodes are in it too), then its temp dir."""
        if self.proc is not None:
            session = self.proc.pid
            deadline = time.monotonic() + 30
            while True:
                mine = [int(p.name) for p in Path("/proc").iterdir()
                        if p.name.isdigit() and _session_of(int(p.name)) == session]
                if not mine or time.monotonic() > deadline:
                    break
                for pid in mine:
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                self.proc.poll()  # (reaps the head: its zombie is no longer counted)
                time.sleep(0.1)
            self.proc.wait(10)
            self.proc = None
        shutil.rmtree(self.temp_dir, ignore_errors=True)
