"""Shared fixtures: one local Ray per test module, and a leak check after every test that uses it; the tiers.

The tiers mirror the package (docs/architecture.md), one directory each, run in this order and marked by
directory: `core` (pure: no Ray, no TensorFlow; seconds), `task` (TensorFlow in this process or a child of it,
no Ray), `ray` (a local Ray with real TensorFlow workers on 127.0.0.1), `cluster` (simulated multi-node:
several raylets). `pytest tests/core` is the inner loop while editing.
"""

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TIERS = ("core", "task", "ray", "cluster")
# Every process this test run starts (Ray's, and through them the tasks' and scripts') inherits this: leak
# checks count this run's processes only, not another run's on the same machine (tests/processes.py).
SESSION_ENV = "RAYTF_TEST_SESSION"
os.environ.setdefault(SESSION_ENV, f"{os.getpid()}-{os.urandom(4).hex()}")


def pytest_collection_modifyitems(config, items):
    for item in items:
        parts = Path(str(item.path)).relative_to(ROOT / "tests").parts
        tier = parts[0] if len(parts) > 1 and parts[0] in TIERS else None
        if tier is not None:
            item.add_marker(tier)
        if tier == "cluster":  # it starts Ray too: `-m "not ray"` leaves it out
            item.add_marker("ray")


@pytest.fixture(scope="module")
def ray_local():
    """A local Ray with 2 CPUs and the dashboard (ray.util.state needs it); shut down afterwards."""
    import ray

    os.chdir(ROOT)  # the tasks import tests.* and examples.* from the driver's working directory
    # address="local": always a fresh cluster of our own, even if another Ray runs on this machine.
    ray.init(address="local", num_cpus=2, include_dashboard=True, configure_logging=False, log_to_driver=False)
    yield ray
    ray.shutdown()


def state_address() -> str:
    """Our cluster's address for ray.util.state (which would otherwise guess, and fail when other Ray
    instances run on this machine)."""
    import ray

    return ray.get_runtime_context().gcs_address


# Ray Data's own actors for the driver's job, made on its first use and kept while the job lives (whoever uses Ray
# Data, raytf or not): not a run's to end.
RAY_DATA_SERVICES = {"datasets_stats_actor", "AutoscalingCoordinator"}


def leftovers() -> dict:
    from ray.util.state import list_actors, list_placement_groups

    address = state_address()
    return {
        "actors": [a.name or a.class_name for a in list_actors(address=address, filters=[("state", "!=", "DEAD")])
                   if (a.name or a.class_name) not in RAY_DATA_SERVICES],
        "placement_groups": [p.name for p in list_placement_groups(
            address=address, filters=[("state", "!=", "REMOVED")])],
    }


@pytest.fixture
def no_leaks(ray_local):
    assert leftovers() == {"actors": [], "placement_groups": []}, "a previous test leaked"
    yield
    import raytf

    raytf.release_standbys()  # (kept for the session's next run otherwise: released, none may be left)
    assert leftovers() == {"actors": [], "placement_groups": []}


def _small(conf: str, tmp_path, defaults: list[str]):
    """A config factory: `conf` with quick settings and storage under tmp_path, plus the test's overrides."""
    import raytf

    def make(*overrides: str):
        # No standby processes unless a test asks (tests/ray/test_standby.py): each would import TensorFlow beside
        # the test's own tasks on 2 cores.
        return raytf.load_config(ROOT / conf, [f"storage.path={tmp_path / 'runs'}", *defaults,
                                               "metrics.flush_interval_s=0", "cluster.standby=0", *overrides])

    return make


@pytest.fixture
def fast_cfg(tmp_path):
    """A small, quick 2-worker MWMS config writing under tmp_path."""
    return _small("conf/local.yaml", tmp_path, ["train.epochs=2", "train.steps_per_epoch=8", "train.batch_size=16",
                                                "metrics.every_steps=4"])


@pytest.fixture
def script_cfg(tmp_path):
    """conf/script.yaml (an unmodified script on 2 MWMS workers) writing under tmp_path."""
    return _small("conf/script.yaml", tmp_path, [])


@pytest.fixture
def ps_cfg(tmp_path):
    """A small ParameterServerStrategy config (chief, 2 workers, 1 ps on 2 CPUs) under tmp_path."""
    return _small("conf/ps_local.yaml", tmp_path, ["train.epochs=3", "train.steps_per_epoch=10",
                                                   "train.batch_size=16", "metrics.every_steps=5"])


def benchmark_smoke(module: str, timeout_s: float):
    """`python -m <module> --smoke` (a benchmark's smoke mode), which must succeed: its CompletedProcess."""
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-m", module, "--smoke"], cwd=ROOT, capture_output=True, text=True,
                         timeout=timeout_s)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    return out
