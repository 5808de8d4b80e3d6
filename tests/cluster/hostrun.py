"""Running raytf on the host bed (tests/hosts.py) the way a user would on a real cluster: `python -m
raytf.launch` on one of its hosts, its output read as it comes, the cluster's state asked from the head."""

import json
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

from tests import hosts
from tests.conftest import ROOT

TASK_ROW = re.compile(r"^\s+(chief|worker|ps|evaluator)\s+(\d+)\s+\S+\s+(198\.18\.0\.\d+):(\d+)")


class Launch:
    """`python -m raytf.launch <config>` on a host of the bed (the head unless `on`), as a user would on a real
    cluster; its output read line by line."""

    def __init__(self, bed: hosts.HostBed, storage: Path, run: str, *overrides: str,
                 on: hosts.Host | None = None, config: str = "conf/two_node.yaml") -> None:
        self.bed, self.storage, self.run = bed, storage, run
        self.lines: list[str] = []
        self.tasks: dict[tuple[str, int], str] = {}  # (role, rank) -> host address, from the driver's task table
        self._seen = threading.Condition()
        argv = [sys.executable, "-m", "raytf.launch", config, "--quiet", f"ray.address={bed.address}",
                f"storage.path={storage}", f"run.name={run}", "cluster.worker.gpus=0", "cluster.placement_timeout_s=90",
                "train.entrypoint=tests.train_fns:paced_loop", "train.batch_size=16", *overrides]
        self.proc = bed.popen(on or bed.head, argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            with self._seen:
                self.lines.append(line.rstrip("\n"))
                m = TASK_ROW.match(line)
                if m:
                    self.tasks[m.group(1), int(m.group(2))] = m.group(3)
                self._seen.notify_all()

    def wait_for_tasks(self, count: int, timeout_s: float = 180) -> dict[tuple[str, int], str]:
        """(role, rank) -> address of the first `count` tasks the driver listed."""
        with self._seen:
            assert self._seen.wait_for(lambda: len(self.tasks) >= count or self.proc.poll() is not None,
                                       timeout_s), self.output()
        assert len(self.tasks) >= count, self.output()
        return dict(self.tasks)

    def wait_for_workers(self, count: int, timeout_s: float = 180) -> dict[int, str]:
        """rank -> address of the MultiWorkerMirroredStrategy workers."""
        return {rank: a for (role, rank), a in self.wait_for_tasks(count, timeout_s).items() if role == "worker"}

    def wait_for_commit(self, timeout_s: float = 180) -> str:
        """The first committed checkpoint's name, once its marker is on storage."""
        deadline = time.monotonic() + timeout_s
        ckpts = self.storage / self.run / "checkpoints"
        while time.monotonic() < deadline and self.proc.poll() is None:
            done = sorted(p.parent.name for p in ckpts.glob("*/_COMMITTED.json"))
            if done:
                return done[0]
            with self._seen:  # a new output line, or a second: then look again
                self._seen.wait(1.0)
        raise AssertionError(f"no committed checkpoint within {timeout_s}s\n{self.output()}")

    def finish(self, timeout_s: float = 420) -> tuple[int, dict]:
        code = self.proc.wait(timeout_s)
        self._reader.join(10)
        return code, json.loads((self.storage / self.run / "result.json").read_text())

    def stop(self) -> None:
        """After a failed test: the driver goes (SIGTERM: raytf tears its run down), so its placement group and
        actor names do not outlive the test into the next one."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(90)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(30)

    def output(self) -> str:
        return "\n".join(self.lines[-60:])

    def __enter__(self) -> "Launch":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def last_commit_before(storage: Path, run: str, attempt: dict) -> str:
    """The newest checkpoint committed before `attempt` started (its marker's time): what it must resume from.
    (A cut-off chief's upload in flight may still commit later; storage here is this machine's disk.)"""
    markers = (storage / run / "checkpoints").glob("*/_COMMITTED.json")
    return max(p.parent.name for p in markers if p.stat().st_mtime <= attempt["started_at"])


def cluster_state(bed: hosts.HostBed, run: str) -> dict:
    """From a driver of its own on the head: where the run's event bus ran, the driver's node, and what of the
    run is still alive (actors, placement groups)."""
    code = ("import json, ray\nfrom ray.util.state import list_actors, list_placement_groups\n"
            f"ray.init(address={bed.address!r}, log_to_driver=False)\n"
            f"actors = list_actors(address={bed.address!r}, detail=True, limit=10000)\n"
            f"mine = [a for a in actors if (a.name or '').startswith('raytf:{run}:')]\n"
            # The bus has no name (raytf issue 19): the EventBuffer actors of the jobs (drivers) of the run's tasks.
            "jobs = {a.job_id for a in mine}\n"
            "buses = [a for a in actors if a.class_name == 'EventBuffer' and a.job_id in jobs]\n"
            f"pgs = [p.name for p in list_placement_groups(address={bed.address!r}) if p.name == 'raytf:{run}' and "
            "p.state != 'REMOVED']\n"
            "print('RAYTF-STATE', json.dumps({"
            "'bus_nodes': sorted({a.node_id for a in buses}), "
            "'driver_node': ray.get_runtime_context().get_node_id(), "
            "'alive': [a.name or a.class_name for a in mine + buses if a.state != 'DEAD'], 'placement_groups': pgs}))")
    out = bed.exec(bed.head, [sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    # Ray may print its own lines too: ours is marked.
    return json.loads(next(line for line in out.stdout.splitlines() if line.startswith("RAYTF-STATE "))[12:])
