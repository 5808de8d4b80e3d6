"""Shared fixtures: one local Ray for the whole session, and a leak check after every test that uses it; the tiers.

The tiers mirror the package (docs/architecture.md), one directory each, run in this order and marked by
directory: `core` (pure: no Ray, no TensorFlow; seconds), `task` (TensorFlow in this process or a child of it,
no Ray), `ray` (a local Ray with real TensorFlow workers on 127.0.0.1), `cluster` (simulated multi-node:
several raylets). `pytest tests/core` is the inner loop while editing.
"""

import contextlib
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


# moto's S3 server accepts any keys; these are planted to be searched for (test_s3_storage.py).
S3_TEST_ENV = {"AWS_ACCESS_KEY_ID": "AKIARAYTFTESTKEY", "AWS_SECRET_ACCESS_KEY": "raytf-test-secret-8c41f",
               "AWS_DEFAULT_REGION": "us-east-1"}


@contextlib.contextmanager
def environ(values: dict[str, str]):
    """This process's environment with `values` set, as it was again afterwards."""
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


class SessionRay:
    """The one local Ray of the whole test session (2 CPUs and the dashboard: ray.util.state needs it), started at
    the first test that asks for it and shut down at the session's end: starting and stopping Ray costs ~10 s here,
    once per module it was ~2.5 minutes of the default run. A module that needs a Ray of its own (other settings, or
    a simulated cluster: `ray.init` connects a process to one Ray at a time) calls `release()` first; the next test
    that asks for the session's Ray starts it again."""

    def up(self):
        import ray

        if not ray.is_initialized():
            os.chdir(ROOT)  # the tasks import tests.* and examples.* from the driver's working directory
            # The S3 tests' credentials in the environment of the processes Ray starts (the tasks inherit them, as
            # on a real cluster's nodes), not in this process's: their module sets its own (test_s3_storage.py).
            with environ(S3_TEST_ENV):
                # address="local": always a fresh cluster of our own, even if another Ray runs on this machine.
                ray.init(address="local", num_cpus=2, include_dashboard=True, configure_logging=False,
                         log_to_driver=False)
        return ray

    def release(self) -> None:
        import sys

        ray = sys.modules.get("ray")  # (never imported: nothing to stop, and the pure tier stays pure)
        if ray is not None and ray.is_initialized():
            ray.shutdown()


@pytest.fixture(scope="session")
def session_ray():
    ray = SessionRay()
    yield ray
    ray.release()


@pytest.fixture
def ray_local(session_ray):
    """The session's local Ray, connected (tests/ray's modules share it; see SessionRay)."""
    return session_ray.up()


def state_address() -> str:
    """Our cluster's address: for ray.util.state (which would otherwise guess, and fail when other Ray instances
    run on this machine), and for a CLI run that joins the session's Ray (`ray.address=...`) instead of starting
    its own."""
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


def _quick(tmp_path, defaults: list[str], overrides) -> list[str]:
    """Quick settings (`defaults`) and storage under tmp_path, then the test's overrides. No standby processes
    unless a test asks (tests/ray/test_standby.py): each would import TensorFlow beside the test's own tasks on 2
    cores. No model export unless a test asks (keras_run's is looked at): ~1 s of CPU in each task of every run,
    which nothing else checks."""
    return [f"storage.path={tmp_path / 'runs'}", "checkpoint.export_model=false", *defaults,
            "metrics.flush_interval_s=0", "cluster.standby=0", *overrides]


def _small(conf: str, tmp_path, defaults: list[str]):
    """A config factory: `conf` with quick settings and storage under tmp_path, plus the test's overrides."""
    import raytf

    def make(*overrides: str):
        return raytf.load_config(ROOT / conf, _quick(tmp_path, defaults, overrides))

    return make


FAST = ["train.epochs=2", "train.steps_per_epoch=8", "train.batch_size=16", "metrics.every_steps=4"]


@pytest.fixture
def fast_cfg(tmp_path):
    """A small, quick 2-worker MWMS config writing under tmp_path. examples.keras_cnn evaluates nothing after its
    epochs here (a tenth of a run's CPU: tracing the evaluation and its steps, measured): keras_run's val_loss is
    the evaluation's test."""
    return _small("conf/local.yaml", tmp_path, [*FAST, "train.params.validation_steps=0"])


# Runs that several tests look at, each trained once for the session (a 2-worker run costs ~15 s here; training
# again per property was minutes of the default run). A test reads them and never changes them: one that must (a
# relaunch, a damaged checkpoint) works on a copy (copy_run). A leak of theirs fails the next leak check.

def _shared_run(session_ray, tmp_path_factory, conf: str, defaults: list[str], *overrides: str):
    import raytf

    session_ray.up()
    # Called as README.md and docs/getting-started.md write it (a config's path, a list of overrides); their blocks
    # themselves run in the slow tier (tests/ray/test_docs_snippets_train.py).
    return raytf.fit(str(ROOT / conf), _quick(tmp_path_factory.mktemp("shared-run"), defaults, overrides), quiet=True)


@pytest.fixture(scope="session")
def keras_run(session_ray, tmp_path_factory):
    """examples.keras_cnn on 2 workers for 3 epochs (fast_cfg's sizes), succeeded: its metrics, curves, TensorBoard
    files, checkpoints and exported model; tracked in MLflow (a `sqlite:///` store, no server: tests/ray/
    test_tracking.py), when MLflow is installed."""
    import importlib.util

    tracked = []
    if importlib.util.find_spec("mlflow") is not None:
        tracked = [f"tracking.mlflow.uri=sqlite:///{tmp_path_factory.mktemp('mlflow') / 'mlflow.db'}"]
    result = _shared_run(session_ray, tmp_path_factory, "conf/local.yaml", FAST, "run.name=keras3", "train.epochs=3",
                         "checkpoint.export_model=true", *tracked)
    assert result.status == "succeeded", result.error
    return result


@pytest.fixture(scope="session")
def rank1_fails_run(session_ray, tmp_path_factory):
    """tests.train_fns:fail_on_rank1 on 2 workers: rank 1 raises ValueError before its first step. raytf.fit raised
    TrainingFailedError (asserted here); the fixture is the Result it carried, whose `error` is that exception."""
    import raytf

    with pytest.raises(raytf.TrainingFailedError) as raised:
        _shared_run(session_ray, tmp_path_factory, "conf/local.yaml", FAST, "run.name=boom",
                    "train.entrypoint=tests.train_fns:fail_on_rank1")
    result = raised.value.result
    assert result is not None and result.error is raised.value
    return result


PS = ["train.epochs=3", "train.steps_per_epoch=10", "train.batch_size=16", "metrics.every_steps=5"]


@pytest.fixture(scope="session")
def ps_run(session_ray, tmp_path_factory):
    """examples.ps_keras under ParameterServerStrategy (chief, 2 workers, 1 ps, and a side-car evaluator running
    examples.ps_keras:evaluate) for 3 epochs of 10 steps, succeeded; its training function refuses to run anywhere
    but on the chief (tests.train_fns:ps_keras_on_the_chief_only: the workers and ps run servers only)."""
    result = _shared_run(session_ray, tmp_path_factory, "conf/ps_local.yaml", PS, "run.name=psfit",
                         "train.entrypoint=tests.train_fns:ps_keras_on_the_chief_only",
                         "cluster.ps.cpus=0.25", "cluster.chief.cpus=0.25", "cluster.evaluator.enabled=true",
                         "cluster.evaluator.cpus=0.5", "train.eval_entrypoint=examples.ps_keras:evaluate",
                         "train.params.steps_per_execution=2")
    assert result.status == "succeeded", result.error
    return result


def copy_run(result, storage: Path):
    """A shared run's directory copied into `storage` (a tmp_path): the config of a relaunch of that copy."""
    import shutil

    import raytf

    shutil.copytree(result.run_dir, storage / Path(result.run_dir).name)
    # (Untracked: a copy is another raytf run, and keras_run's MLflow store holds keras_run's alone.)
    return raytf.load_config(result.config, {"storage.path": str(storage), "tracking.mlflow.uri": ""})


@pytest.fixture
def script_cfg(tmp_path):
    """conf/script.yaml (an unmodified script on 2 MWMS workers) writing under tmp_path."""
    return _small("conf/script.yaml", tmp_path, [])


@pytest.fixture
def ps_cfg(tmp_path):
    """A small ParameterServerStrategy config (chief, 2 workers, 1 ps on 2 CPUs) under tmp_path."""
    return _small("conf/ps_local.yaml", tmp_path, PS)


def benchmark_smoke(module: str, timeout_s: float):
    """`python -m <module> --smoke` (a benchmark's smoke mode), which must succeed: its CompletedProcess."""
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-m", module, "--smoke"], cwd=ROOT, capture_output=True, text=True,
                         timeout=timeout_s)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    return out


def kill_at_a_commit_before(last_epoch: int, actor: str, killed: list[int]):
    """An on_event that kills the task actor named `actor` (a worker lost, with its script) at the first checkpoint
    commit of an epoch before `last_epoch`, noting that epoch in `killed`. Any commit before the last: under load
    the driver may see epoch 1's commit late (with 3 epochs the first commit seen was once the final one, and the
    kill came after training)."""
    def on_event(e):
        if e.kind == "checkpoint" and not killed and e.payload.epoch < last_epoch:
            import ray

            killed.append(e.payload.epoch)
            ray.kill(ray.get_actor(actor), no_restart=True)

    return on_event

