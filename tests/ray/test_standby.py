"""Standby task processes (cluster.standby, raytf/_driver/standby.py): a retry's tasks and a later run's start in
processes that imported TensorFlow already; none is left once released (and the leak check releases them)."""

import threading
import time

import pytest

import raytf
from tests.conftest import benchmark_smoke
from tests.processes import wait_exit

pytestmark = [pytest.mark.ray, pytest.mark.timeout(300)]


def _wait_ready(count: int, timeout_s: float = 120.0) -> dict:
    """Once the session's pool holds `count` ready standbys (they import TensorFlow in the background): its counts."""
    import ray

    from raytf._driver import standby

    assert standby.wait_ready(count, timeout_s), f"no {count} standbys ready in {timeout_s}s"
    return ray.get(standby.pool(create=False).counts.remote())


def _pids(result) -> dict[tuple[int, int], float]:
    steps = result.metrics[result.metrics["kind"] == "step"]
    return {(a, r): p for (a, r), p in steps.groupby(["attempt", "rank"])["pid"].first().items()}


@pytest.mark.slow  # step 2: ~45 s, three runs; the session's standbys ending with it run by default
def test_a_scripts_retry_and_next_run_start_in_standbys_warm_children(script_cfg, no_leaks, tmp_path, monkeypatch):
    """A script's standbys hold a child process with TensorFlow imported, waiting for its script (script/spawn.py):
    a retry's and the next run's scripts run in them. (A training function's retry in standbys: the recovery
    benchmark's smoke below; its next run: benchmarks.run's smoke, the `function` contender.)"""
    import ray

    from raytf._driver import standby
    from tests.processes import _children, leftover_script_processes

    # An attempt asks for standbys after REFILL_AFTER_S of training (0: at its first step); 2 s here, so that the
    # refill is asked for while the script trains, as a longer run's is.
    monkeypatch.setattr(standby, "REFILL_AFTER_S", 2.0)

    fail_file = tmp_path / "fail"
    cfg = script_cfg("run.name=warm", "train.script=tests/scripts/fail_when_told.py", "cluster.standby=2",
                     f"train.args=[--fail-file, '{fail_file}', --steps, '2000']", "metrics.every_steps=1")
    out = {}
    run = threading.Thread(target=lambda: out.setdefault("result", raytf.fit(cfg, quiet=True)))
    run.start()
    try:
        counts = _wait_ready(2)  # made once attempt 1 trains: one per task on this node
        fail_file.write_text("now")
    finally:
        run.join(timeout=240)
    result = out["result"]
    assert result.status == "succeeded", result.error
    first, second = result.summary["attempts"]
    assert first["standby_tasks"] == 0 and second["standby_tasks"] == 2, result.summary["attempts"]
    assert len(counts) == 1  # (one node)
    pids = _pids(result)
    assert {pids[(2, 0)], pids[(2, 1)]}.isdisjoint({pids[(1, 0)], pids[(1, 1)]})
    steps = result.metrics[result.metrics["kind"] == "step"]
    # Every script ran in a warm child: attempt 1's started beside their tasks' start (the session had no script
    # template yet: each imported TensorFlow itself), attempt 2's in the standbys, forked by the node's template
    # (template.py), which the pool made for them and which imported TensorFlow once.
    assert set(steps["warm"]) == {1.0}, steps.groupby(["attempt", "rank"])["warm"].first()
    forked = steps.groupby("attempt")["forked"].agg(set).to_dict()
    assert forked == {1: {0.0}, 2: {1.0}}, forked
    retry_recovery = second["recovery_s"]

    # The next run of the session: two of its scripts start in the standbys the first run asked for as it ended;
    # the third, with no standby left, in a child the node's template forks as the task starts.
    _wait_ready(2)
    again = raytf.fit(script_cfg("run.name=warm2", "train.script=tests/scripts/fail_when_told.py",
                                 "cluster.standby=2", "cluster.num_workers=3", "cluster.worker.cpus=0.5",
                                 f"train.args=[--fail-file, '{tmp_path / 'never'}']"), quiet=True)
    assert again.status == "succeeded", again.error
    assert again.summary["attempts"][0]["standby_tasks"] == 2
    again_steps = again.metrics[again.metrics["kind"] == "step"]
    assert set(again_steps["forked"]) == {1.0} and again_steps["rank"].nunique() == 3
    print(f"recovery_s of the retry in standbys: {retry_recovery}; first step of the warm run: "
          f"{again.summary['first_step_s']}s")

    # Released (the leak check does it too): the pool and its standbys are gone, their warm children included.
    _wait_ready(2)
    pids_before = [p["pid"] for p in ray.util.state.list_actors(
        address=ray.get_runtime_context().gcs_address, filters=[("class_name", "=", "TaskActor"),
                                                                ("state", "=", "ALIVE")], detail=True)]
    assert len(pids_before) == 2
    assert _children()  # the standbys' warm children (and their sentinels), waiting for a script
    assert raytf.release_standbys() == 2
    assert wait_exit(pids_before, 15) == []
    assert leftover_script_processes() == []


def test_standbys_end_with_the_session_that_made_them(no_leaks, tmp_path):
    """A session (another driver process on this cluster, its code shipped as the job's working_dir) makes standbys,
    processes its node's template forked that import the session's code, and exits without releasing them: Ray ends
    them with their owner, nothing of them (or of the template) is left."""
    import subprocess
    import sys

    import ray

    from tests.conftest import ROOT, leftovers

    (tmp_path / "shipped_probe.py").write_text("WHERE = __file__\n")
    code = f"""
import ray
ray.init(address={ray.get_runtime_context().gcs_address!r}, configure_logging=False, log_to_driver=False,
         runtime_env={{"working_dir": {str(tmp_path)!r}}})
import raytf
from raytf._core.plan import make_plan, task_runtime_env
from raytf._driver import standby
cfg = raytf.load_config("conf/local.yaml")
env = task_runtime_env(cfg, make_plan(cfg).tasks[0])
pool = standby.pool()
node, key = ray.get_runtime_context().get_node_id(), standby.env_key(env)
ray.get(pool.fill.remote(node, key, env, 2))
assert standby.wait_ready(2, 90)
# A function's standbys are processes the node's template forked, TensorFlow imported (raytf issue 53).
# They see the job's working_dir as a worker Ray started would: its directory, its modules importable.
def probe(self):
    import os
    import shipped_probe
    return open(f"/proc/{{os.getppid()}}/cmdline").read(), os.path.dirname(shipped_probe.WHERE) == os.getcwd()
seen = ray.get([a.__ray_call__.remote(probe) for a in ray.get(pool.take.remote(node, key, 2))])
assert all("raytf._task.script.template" in parent and here for parent, here in seen), seen
print("ready", flush=True)
"""
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "ready" in proc.stdout, proc.stderr[-2000:]
    deadline = time.monotonic() + 30
    alive = None
    while time.monotonic() < deadline:
        # (Ray Data's own actors, from an earlier test of the session, are not a run's: leftovers() leaves them out.)
        alive = leftovers()["actors"]
        if not alive:
            break
        time.sleep(0.2)  # polling Ray's state for the owner's death to reach its actors, bounded
    assert alive == []


# With the other benchmarks' smokes (tests/ray/test_scaling.py): ~1.5 min, past the default run's budget
@pytest.mark.bench
@pytest.mark.timeout(400)
def test_recovery_benchmark_smoke_mode_runs():
    """`python -m benchmarks.recovery --smoke`: one run with standbys (its own Ray); the retry took them."""
    out = benchmark_smoke("benchmarks.recovery", timeout_s=380)
    assert not [line for line in out.stdout.splitlines() if line.startswith("| 0 |")]  # (the smoke's one arm)
    rows = [line for line in out.stdout.splitlines() if line.startswith("| 2 |")]
    assert rows and rows[0].split("|")[3].strip() == "2.00", out.stdout


class _GatedKeeper:
    """A template's keeper (script/keeper.py's TemplateKeeper, as the pool calls it) whose import ends when the test
    says: `go(True)` as imported, `go(False)` as failed."""

    def __init__(self, name: str, env: dict) -> None:
        import asyncio

        self._told = asyncio.Event()
        self._ok = True

    async def imported(self) -> float:
        await self._told.wait()
        if not self._ok:
            raise RuntimeError("the template could not import TensorFlow")
        return 3.5

    async def worker_command(self) -> str:
        return "python -m raytf._task.script.worker_shim gated"

    async def go(self, ok: bool) -> None:
        self._ok = ok
        self._told.set()


@pytest.mark.timeout(120)
def test_a_template_is_handed_out_only_once_it_has_imported(no_leaks):
    """A group's script tasks never wait for a template still importing TensorFlow: the pool hands out a node's
    template only once it has imported (StandbyPool.template, which standby.Slots.take asks); before that, a
    task's child imports TensorFlow itself. Measured otherwise (benchmarks/RESULTS.md, the seventh measurement:
    tasks waiting for the template), a first run's first step came 2 s later. A template that failed is dropped, and
    the next fill makes another."""
    from concurrent.futures import ThreadPoolExecutor

    import ray

    from raytf._core.standbys import SCRIPT_KEY
    from raytf._driver.standby_pool import StandbyPool

    pool = StandbyPool()
    pool._keeper = ray.remote(_GatedKeeper)
    node = ray.get_runtime_context().get_node_id()
    keeper = pool._template(node, "k", {})
    asking = ThreadPoolExecutor(1)
    try:
        assert pool._template(node, "k", {}) is keeper  # one per node and key
        # (on a thread: a pool that waited for the import would otherwise hang the test, not fail it)
        assert asking.submit(pool.template, node, "k").result(timeout=10) is None
        assert pool.template(node, "other") is None
        ray.get(keeper.go.remote(True))
        ray.wait([pool._imported[(node, "k")]], timeout=30)
        template = pool.template(node, "k")
        assert template.keeper is keeper and template.worker_command.endswith("worker_shim gated")
        # A script's standbys of the same runtime_env fork from the same template (standbys.template_key).
        assert pool._template(node, "k" + SCRIPT_KEY, {}) is keeper
        assert pool.template(node, "k" + SCRIPT_KEY) == template

        failing = pool._template(node, "f", {})
        ray.get(failing.go.remote(False))
        ray.wait([pool._imported[(node, "f")]], timeout=30)
        assert pool.template(node, "f") is None  # dropped (and killed): the next fill makes another
        assert pool._template(node, "f", {}) is not failing
    finally:
        ray.get(keeper.go.remote(True))  # (a pool that waited returns now)
        asking.shutdown()
        pool.release()
