"""raytf on a network of hosts (tests/hosts.py): each host a network namespace with its own address and Ray
node; the driver runs `python -m raytf.launch` on the head host, as a user would on a real cluster."""

import json
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests import hosts
from tests.conftest import ROOT

pytestmark = [pytest.mark.timeout(600)]

TASK_ROW = re.compile(r"^\s+worker\s+(\d+)\s+\S+\s+(198\.18\.0\.\d+):(\d+)")


@pytest.fixture(scope="module")
def bed():
    # The head (driver, GCS, the run's event bus) with no CPUs for tasks; two hosts for the workers.
    yield from hosts.bed_for_tests([0, 2, 2])


class Launch:
    """`python -m raytf.launch conf/two_node.yaml` on the head host; its output read line by line."""

    def __init__(self, bed: hosts.HostBed, storage: Path, run: str, *overrides: str) -> None:
        self.bed, self.storage, self.run = bed, storage, run
        self.lines: list[str] = []
        self.workers: dict[int, str] = {}  # rank -> host address, from the task table the driver logs
        self._seen = threading.Condition()
        argv = [sys.executable, "-m", "raytf.launch", "conf/two_node.yaml", "--quiet", f"ray.address={bed.address}",
                f"storage.path={storage}", f"run.name={run}", "cluster.worker.gpus=0", "cluster.placement_timeout_s=90",
                "train.entrypoint=tests.train_fns:paced_loop", "train.batch_size=16", *overrides]
        self.proc = bed.popen(bed.head, argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            with self._seen:
                self.lines.append(line.rstrip("\n"))
                m = TASK_ROW.match(line)
                if m:
                    self.workers[int(m.group(1))] = m.group(2)
                self._seen.notify_all()

    def wait_for_workers(self, count: int, timeout_s: float = 180) -> dict[int, str]:
        with self._seen:
            assert self._seen.wait_for(lambda: len(self.workers) >= count or self.proc.poll() is not None,
                                       timeout_s), self.output()
        assert len(self.workers) >= count, self.output()
        return dict(self.workers)

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

    def __enter__(self) -> "Launch":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def _last_commit_before(storage: Path, run: str, attempt: dict) -> str:
    """The newest checkpoint committed before `attempt` started (its marker's time): what it must resume from.
    (A cut-off chief's upload in flight may still commit later; storage here is this machine's disk.)"""
    markers = (storage / run / "checkpoints").glob("*/_COMMITTED.json")
    return max(p.parent.name for p in markers if p.stat().st_mtime <= attempt["started_at"])

    def output(self) -> str:
        return "\n".join(self.lines[-60:])


def _cluster_state(bed: hosts.HostBed, run: str) -> dict:
    """From a driver of its own on the head: where the run's event bus ran, the driver's node, and what of the
    run is still alive (actors, placement groups)."""
    code = ("import json, ray\nfrom ray.util.state import list_actors, list_placement_groups\n"
            f"ray.init(address={bed.address!r}, log_to_driver=False)\n"
            f"mine = [a for a in list_actors(address={bed.address!r}, detail=True) if (a.name or '').startswith("
            f"'raytf:{run}:')]\n"
            f"pgs = [p.name for p in list_placement_groups(address={bed.address!r}) if p.name == 'raytf:{run}' and "
            "p.state != 'REMOVED']\n"
            "print('RAYTF-STATE', json.dumps({"
            "'bus_nodes': sorted({a.node_id for a in mine if a.name.endswith(':events:0')}), "
            "'driver_node': ray.get_runtime_context().get_node_id(), "
            "'alive': [a.name for a in mine if a.state != 'DEAD'], 'placement_groups': pgs}))")
    out = bed.exec(bed.head, [sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    # Ray may print its own lines too: ours is marked.
    return json.loads(next(line for line in out.stdout.splitlines() if line.startswith("RAYTF-STATE "))[12:])


def test_two_node_yaml_across_hosts_uses_each_hosts_address(bed, tmp_path):
    with Launch(bed, tmp_path, "hosts2", "train.epochs=2", "train.steps_per_epoch=4", "train.params.step_s=0") as run:
        code, result = run.finish()
    assert code == 0, run.output()
    assert result["status"] == "succeeded"
    tasks = {t["rank"]: t for t in result["tasks"]}
    addresses = {t["host"] for t in tasks.values()}
    assert len(addresses) == 2 and addresses <= {h.address for h in bed.hosts[1:]}  # STRICT_SPREAD: two hosts
    spec = sorted(t["address"] for t in tasks.values())
    for rank in (0, 1):
        log = (tmp_path / "hosts2" / "logs" / f"worker{rank}-attempt1.log").read_text()
        tf_config = json.loads(re.search(r"TF_CONFIG (\{.*\})", log).group(1))
        assert sorted(tf_config["cluster"]["worker"]) == spec  # each task's own host:port, not 127.0.0.1
        assert tf_config["task"] == {"type": "worker", "index": rank}
    # The run's event bus ran on the driver's own node: a lost worker host cannot take it along.
    state = _cluster_state(bed, "hosts2")
    assert state["bus_nodes"] == [state["driver_node"]]
    assert (state["alive"], state["placement_groups"]) == ([], [])


def _fault_mid_run(bed, tmp_path, name: str, rank: int, fault, after):
    """A paced 2-worker run; once it has committed a checkpoint, `fault(victim)` on rank `rank`'s host; the run
    is left to finish; then `after(victim)` (still inside, e.g. a heal and its checks), and always the victim
    revived and the driver stopped. Returns (victim, the fault's time, exit code, result.json, the Launch)."""
    run = Launch(bed, tmp_path, name, "cluster.placement_strategy=SPREAD", "train.epochs=6",
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
            bed.revive(victim)  # for the next test: a fresh node in place of the lost one
    return victim, fault_at, code, result, run


def _assert_finished_elsewhere(bed, tmp_path, name: str, victim, code: int, result: dict, run: Launch) -> dict:
    """The run succeeded on the other hosts in a second attempt resumed from the last commit before it, and
    nothing of it is left on the cluster. Returns that attempt."""
    assert code == 0, run.output()
    assert result["status"] == "succeeded", result["error"]
    first, *rest = result["attempts"]
    assert first["status"] == "failed" and rest and rest[-1]["status"] == "succeeded", result["attempts"]
    # Resumed from the last commit before the failure: nothing lost beyond it.
    assert rest[0]["resumed_from"] == _last_commit_before(tmp_path, name, rest[0])
    assert {t["host"] for t in result["tasks"]} <= {h.address for h in bed.hosts if h is not victim}
    state = _cluster_state(bed, name)
    assert (state["alive"], state["placement_groups"]) == ([], [])
    return rest[0]


@pytest.mark.parametrize("rank", [1, pytest.param(0, marks=pytest.mark.slow)])
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
    assert max(epochs) == 6
    recovered_after = second["first_step_at"] - cut_at
    print(f"partition -> the next attempt's first step: {recovered_after:.1f}s "
          f"(recovery_s {second['recovery_s']}s after the failure was seen)")
    assert recovered_after < 150


@pytest.mark.parametrize("rank", [0, pytest.param(1, marks=pytest.mark.slow)])
def test_killed_host_the_run_finishes_on_the_other(bed, tmp_path, rank):
    """Every process of rank 0's host (or rank 1's) SIGKILLed: a power cut."""
    victim, killed_at, code, result, run = _fault_mid_run(bed, tmp_path, "power", rank, bed.kill_host,
                                                          lambda victim: None)
    second = _assert_finished_elsewhere(bed, tmp_path, "power", victim, code, result, run)
    print(f"host killed -> the next attempt's first step: {second['first_step_at'] - killed_at:.1f}s")


@pytest.mark.slow
def test_slow_links_training_completes(bed, tmp_path):
    """2 ms each way and 1 Gbit/s on every host's link (tc netem): a LAN between racks, not one machine."""
    try:
        for h in bed.hosts:
            bed.slow_link(h, delay_ms=2, rate="1gbit")
    except hosts.NetemUnavailable as e:
        pytest.skip(f"this kernel cannot shape links: {e}")
    try:
        assert bed.reachable(bed.hosts[1], bed.hosts[2])
        with Launch(bed, tmp_path, "slow", "train.epochs=2", "train.steps_per_epoch=10",
                    "train.params.step_s=0") as run:
            code, result = run.finish()
    finally:
        for h in bed.hosts:
            bed.unshape(h)
    assert code == 0, run.output()
    assert result["status"] == "succeeded" and len({t["host"] for t in result["tasks"]}) == 2
    steps = [a.get("first_step_at") for a in result["attempts"]]
    print(f"slow links: first step after {result['first_step_s']}s, run {result['duration_s']}s ({steps})")
