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

    from raytf._driver import standby

    assert standby.wait_ready(count, timeout_s), f"no {count} standbys ready in {timeout_s}s"
    return standby.pool(create=False).counts()


def _first_rows(result):
    """Each rank's first step row (one attempt)."""
    steps = result.metrics[result.metrics["kind"] == "step"]
    return steps.sort_values("step").groupby("rank").first()


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
    # Every script ran in a warm child: attempt 1's started beside their tasks' start, attempt 2's in the standbys.
    assert set(steps["warm"]) == {1.0}, steps.groupby(["attempt", "rank"])["warm"].first()
    retry_recovery = second["recovery_s"]

    # The next run of the session: its scripts start in the standbys the first run asked for as it ended.
    _wait_ready(2)
    again = raytf.fit(script_cfg("run.name=warm2", "train.script=tests/scripts/fail_when_told.py",
                                 "cluster.standby=2", f"train.args=[--fail-file, '{tmp_path / 'never'}']"),
                      quiet=True)
    assert again.status == "succeeded", again.error
    assert again.summary["attempts"][0]["standby_tasks"] == 2
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


def test_standbys_end_with_the_session_that_made_them(no_leaks):
    """A session (another driver process on this cluster) makes standbys and exits without releasing them: Ray
    ends them with their owner, nothing of them is left."""
    import subprocess
    import sys

    import ray

    from tests.conftest import ROOT, leftovers

    code = f"""
import ray
ray.init(address={ray.get_runtime_context().gcs_address!r}, configure_logging=False, log_to_driver=False)
import raytf
from raytf._core.plan import make_plan, task_runtime_env
from raytf._driver import standby
cfg = raytf.load_config("conf/local.yaml")
env = task_runtime_env(cfg, make_plan(cfg).tasks[0])
pool = standby.pool()
pool.fill(ray.get_runtime_context().get_node_id(), standby.env_key(env), env, 2)
assert standby.wait_ready(2, 90)
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


def _started_then(started, run: threading.Thread, timeout_s: float = 120.0) -> None:
    """Until the run in `run` has made the file `started` (its ranks hold, training), bounded."""
    deadline = time.monotonic() + timeout_s
    while not started.exists():
        assert run.is_alive() and time.monotonic() < deadline, "the run never started training"
        time.sleep(0.05)  # (polling for the run's own signal, the file, bounded)


@pytest.mark.timeout(300)
def test_no_random_state_is_shared_and_a_release_mid_run_leaves_the_run_alone(fast_cfg, no_leaks, tmp_path):
    """Three runs of one session (the second and third start in the standbys the one before asked for as it ended):
    the unseeded draws of numpy's, Python's and TensorFlow's global generators differ across every rank and every
    run (forked processes once shared numpy's: raytf issue 70); a seeded program draws the seed's values on every
    rank. The third run's standbys are released while it trains (raytf.release_standbys, the public call): the
    tasks it took are its own, and it ends in one attempt, succeeded."""
    import random

    import numpy as np

    def cfg(name: str, *more: str):
        return fast_cfg(f"run.name={name}", "train.entrypoint=tests.train_fns:random_draws", "cluster.standby=2",
                        "train.epochs=1", "train.steps_per_epoch=3", *more)

    draws, took = [], []
    for i in range(2):
        result = raytf.fit(cfg(f"draws{i}"), quiet=True)
        assert result.status == "succeeded", result.error
        draws.append(_first_rows(result))
        took.append(result.summary["attempts"][0]["standby_tasks"])
        _wait_ready(2)  # (as a notebook's next cell finds them: the run asked for them as it ended)

    started, go = tmp_path / "started", tmp_path / "go"
    out = {}
    run = threading.Thread(target=lambda: out.setdefault("result", raytf.fit(
        cfg("draws2", f"train.params.started_file={started}", f"train.params.go_file={go}"), quiet=True)))
    run.start()
    try:
        _started_then(started, run)
        released = raytf.release_standbys()  # (the run's own refill, asked at its first step, among them)
    finally:
        go.touch()
        run.join(timeout=120)
    third = out["result"]
    assert third.status == "succeeded", third.error
    assert len(third.summary["attempts"]) == 1, third.summary["attempts"]
    draws.append(_first_rows(third))
    took.append(third.summary["attempts"][0]["standby_tasks"])
    assert took == [0, 2, 2], took
    pids = [p for d in draws for p in d["pid"]]
    assert len(set(pids)) == 6, pids  # (six processes: every task its own)
    for gen in ("np", "py", "tf"):
        values = [v for d in draws for v in d[gen]]
        assert len(set(values)) == 6, (gen, values)
    print(f"released mid-run: {released}; draws per run and rank:",
          [d[["np", "py", "tf"]].round(6).values.tolist() for d in draws])

    seeded = _first_rows(raytf.fit(cfg("seeded", "train.params.seed=7", "cluster.standby=0"), quiet=True))
    assert set(seeded["np"]) == {np.random.RandomState(7).rand()}
    assert set(seeded["py"]) == {random.Random(7).random()}
    assert seeded["tf"].nunique() == 1


@pytest.mark.slow  # step 2: two script runs (the function's release mid-run runs by default, above)
@pytest.mark.timeout(300)
def test_a_scripts_run_survives_the_release_of_the_standbys_it_took(script_cfg, no_leaks, tmp_path):
    """A script's run trains in warm children of standbys it took; the session releases its standbys meanwhile:
    the run's tasks are its own (made by this process, not by a pool actor), and it ends in one attempt."""
    from tests.processes import leftover_script_processes

    def cfg(name: str, started, go):
        return script_cfg(f"run.name={name}", "train.script=tests/scripts/hold_until_told.py", "cluster.standby=2",
                          f"train.args=[--started-file, '{started}', --go-file, '{go}']")

    (tmp_path / "go0").touch()
    first = raytf.fit(cfg("held0", tmp_path / "started0", tmp_path / "go0"), quiet=True)
    assert first.status == "succeeded", first.error
    _wait_ready(2)
    started, go = tmp_path / "started", tmp_path / "go"
    out = {}
    run = threading.Thread(target=lambda: out.setdefault("result", raytf.fit(cfg("held1", started, go), quiet=True)))
    run.start()
    try:
        _started_then(started, run)
        raytf.release_standbys()
    finally:
        go.touch()
        run.join(timeout=120)
    result = out["result"]
    assert result.status == "succeeded", result.error
    attempts = result.summary["attempts"]
    assert len(attempts) == 1 and attempts[0]["standby_tasks"] == 2, attempts
    raytf.release_standbys()
    assert leftover_script_processes() == []
