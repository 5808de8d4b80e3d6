"""A Ray Train loop in a raytf task (raytf/_task/raytrain.py, ray_train_private.py) without Ray's cluster: while the
loop runs, Ray Train v1's functions (what ray.train binds with RAY_TRAIN_V2_ENABLED=0) reach the task's bridge as
v2's do, and both seams are as they were once it returns; a Ray that moved v1's session sets v2's only."""

import json
import logging
import os
from pathlib import Path
from types import SimpleNamespace

import pytest

from raytf._core.raytrain import local_ranks

pytestmark = pytest.mark.timeout(180)

WORKERS = ["h1:2000", "h2:2000", "h2:2001"]  # rank 2 shares h2 with rank 1: local rank 1 of 2, node 1


class FakeTask:
    """What raytrain's bridge asks of a task's TrainContext, recorded."""

    def __init__(self, tmp_path, rank: int) -> None:
        self.cfg = SimpleNamespace(run=SimpleNamespace(name="exp"))
        self.rank, self.num_workers, self.is_chief = rank, len(WORKERS), rank == 0
        self.epoch, self.step, self.params = 0, 0, {"lr": 0.1}
        self.scratch_dir = str(tmp_path / "scratch")
        os.makedirs(self.scratch_dir, exist_ok=True)
        self.reports: list[dict] = []
        self.committed: list[list[str]] = []

    def epoch_end(self, metrics) -> None:
        self.epoch += 1
        self.reports.append(dict(metrics))

    def commit(self, local: str) -> None:
        self.committed.append(sorted(os.listdir(local)))

    def download_resumed(self, local: str) -> str:
        os.makedirs(local)
        with open(os.path.join(local, "state.txt"), "w") as f:
            f.write("resumed")
        return local

    def dataset_shard(self, name):
        return f"shard of {name}"


@pytest.fixture
def task(tmp_path, monkeypatch, tf):
    from raytf._task import raytrain_keras

    # (The Keras step counting the loop also gets is raytrain_keras's, tested with Ray: not what is tested here.)
    monkeypatch.setattr(raytrain_keras, "steps_reported", lambda ctx: _nothing())

    def make(rank: int) -> FakeTask:
        monkeypatch.setenv("TF_CONFIG", json.dumps({"cluster": {"worker": WORKERS},
                                                    "task": {"type": "worker", "index": rank}}))
        return FakeTask(tmp_path, rank)

    return make


def _nothing():
    import contextlib

    return contextlib.nullcontext()


def _v1_loop(seen: dict, tmp_path):
    """A loop calling Ray Train v1's functions, as ray.train binds them with RAY_TRAIN_V2_ENABLED=0."""

    def loop(config):
        from ray.train import Checkpoint
        from ray.train._internal import session
        from ray.train.context import TrainContext
        from ray.tune.trainable.trainable_fn_utils import _in_tune_session

        seen["config"] = config
        seen["in_tune"] = bool(_in_tune_session())  # (a session without a world rank would be Ray Tune's)
        resumed = session.get_checkpoint()
        seen["resumed"] = Path(resumed.path, "state.txt").read_text()
        seen["shard"] = session.get_dataset_shard("train")
        context = TrainContext()
        seen["context"] = (context.get_world_rank(), context.get_world_size(), context.get_local_rank(),
                           context.get_local_world_size(), context.get_node_rank(), context.get_experiment_name())
        seen["metadata"] = context.get_metadata()
        for what in (context.get_storage, context.get_trial_name, context.get_trial_dir):
            with pytest.raises(NotImplementedError, match="is not mapped to raytf"):
                what()
        saved = tmp_path / "saved"
        saved.mkdir()
        (saved / "model.keras").write_text("weights")
        session.report({"loss": 0.5}, checkpoint=Checkpoint.from_directory(str(saved)))
        session.report({"loss": 0.25})

    return loop


@pytest.mark.parametrize("rank", [0, 2])
def test_ray_train_v1s_functions_reach_the_bridge_while_the_loop_runs(rank, task, tmp_path, monkeypatch):
    from ray.train._internal import session
    from ray.train.v2._internal.execution import train_fn_utils

    from raytf._task import raytrain

    before = object()  # (whatever this process had there is put back)
    monkeypatch.setattr(session, "_session", before)
    ctx, seen = task(rank), {}
    raytrain.loop(_v1_loop(seen, tmp_path))(ctx)
    assert seen["config"] == {"lr": 0.1} and seen["in_tune"] is False
    assert seen["resumed"] == "resumed" and seen["shard"] == "shard of train" and seen["metadata"] == {}
    assert seen["context"] == (rank, 3, *local_ranks(WORKERS, rank), "exp")
    assert seen["context"][2:5] == ((0, 1, 0) if rank == 0 else (1, 2, 1))
    # Each report an epoch row; rank 0's checkpoint copied and committed (another rank's dropped), as v2's are.
    assert ctx.reports == [{"loss": 0.5}, {"loss": 0.25}]
    assert ctx.committed == ([["model.keras"]] if rank == 0 else [])
    # Both seams as they were once the loop returned.
    assert session._session is before
    with pytest.raises(RuntimeError):
        train_fn_utils.get_train_fn_utils()


def test_v1s_resume_from_checkpoint_is_get_checkpoint_until_the_run_has_its_own(task, tmp_path, monkeypatch):
    """TensorflowTrainer(resume_from_checkpoint=c) under v1 (raytf.compat's StartingFrom): the loop gets c while the
    run has committed nothing of its own; a retry's (or relaunch's) resumed checkpoint comes first, as under v1."""
    import cloudpickle
    from ray.train import Checkpoint
    from ray.train._internal import session

    from raytf._core.raytrain import StartingFrom
    from raytf._driver.pickling import label_of
    from raytf._task import raytrain

    given = Checkpoint.from_directory(str(tmp_path))
    seen = []

    def train_loop():
        seen.append(session.get_checkpoint())

    start = StartingFrom(train_loop, given)
    assert cloudpickle.loads(cloudpickle.dumps(start)).checkpoint.path == given.path  # (as it travels to a task)
    assert label_of(StartingFrom(train_loop, given), "fn") == label_of(train_loop, "fn")  # (the config: the loop's)
    ctx = task(0)
    monkeypatch.setattr(ctx, "download_resumed", lambda local: None)  # (the run's first attempt: nothing resumed)
    raytrain.loop(start)(ctx)
    assert seen[0].path == given.path
    raytrain.loop(StartingFrom(train_loop, given))(task(0))  # (the run has one: the given one is not what it wants)
    assert Path(seen[1].path, "state.txt").read_text() == "resumed"


def test_v1s_and_v2s_report_reach_the_same_bridge(task, tmp_path):
    from ray.train._internal import session
    from ray.train.v2.api import train_fn_utils as v2

    from raytf._task import raytrain

    ctx = task(0)

    def loop():
        session.report({"loss": 1.0})
        v2.report({"loss": 2.0})
        assert v2.get_context().get_world_size() == session.get_world_size() == 3

    raytrain.loop(loop)(ctx)
    assert ctx.reports == [{"loss": 1.0}, {"loss": 2.0}] and session._session is None


def test_a_ray_that_moved_v1s_session_sets_v2s_seam_only(task, tmp_path, monkeypatch, caplog):
    from ray.train._internal import session
    from ray.train.v2.api import train_fn_utils as v2

    from raytf._core import private_apis as apis
    from raytf._task import ray_train_private, raytrain

    def renamed(self, training_func, world_rank, local_rank, node_index, local_world_size, world_size, **rest):
        self.world_rank, self.local_rank, self.node_index = world_rank, local_rank, node_index
        self.local_world_size, self.world_size = local_world_size, world_size

    # As a Ray whose v1 session renamed an attribute raytf's stand-in answers (v2 itself still needs get_session:
    # its functions ask it whether they run in Ray Tune).
    monkeypatch.setattr(session._TrainSession, "__init__", renamed)
    caplog.set_level(logging.DEBUG, logger=ray_train_private.__name__)
    ctx = task(0)
    raytrain.loop(lambda: v2.report({"loss": 1.0}))(ctx)
    assert ctx.reports == [{"loss": 1.0}] and session._session is None  # v2's set; v1's never touched
    (line,) = [r.getMessage() for r in caplog.records if "v1's seam not set" in r.getMessage()]
    assert apis.V1_SESSION_RANKS.dotted in line and "no longer uses node_rank" in line
    # A process whose ray.train is v1's would lose its reports: refused, on the driver and in the task, one line.
    monkeypatch.setenv("RAY_TRAIN_V2_ENABLED", "0")
    for where in (ray_train_private.check, lambda: raytrain.loop(lambda: None)(task(0))):
        with pytest.raises(ray_train_private.RayTrainMoved) as moved:
            where()
        message = str(moved.value)
        assert "RAY_TRAIN_V2_ENABLED=0" in message and apis.V1_SESSION_RANKS.dotted in message
        assert "Fix: unset RAY_TRAIN_V2_ENABLED" in message and "\n" not in message


def test_ray_train_v1s_config_classes_read_as_v2s():
    """ray.air.config's classes (ray.train's with RAY_TRAIN_V2_ENABLED=0) give raytf what v2's give; their defaults
    (v1's __post_init__ fills some in) warn of nothing, v1's own settings one line each, as v2's unmapped ones."""
    import ray.air.config as v1
    import ray.train.v2.api.config as v2
    from ray.train import SyncConfig

    from raytf._core.raytrain import run_overrides, scaling_overrides
    from raytf.config import load_config
    from tests.conftest import ROOT

    def read(scaling, run):
        (cluster, warned), (rest, more) = scaling_overrides(scaling), run_overrides(run)
        return {**cluster, **rest}, warned + more

    for module in (v1, v2):
        out, warnings = read(module.ScalingConfig(num_workers=2, resources_per_worker={"CPU": 2}), module.RunConfig(
            name="exp", storage_path="/shared/runs", checkpoint_config=module.CheckpointConfig(num_to_keep=2),
            failure_config=module.FailureConfig(max_failures=3)))
        assert warnings == [], (module.__name__, warnings)
        assert out == {"cluster.num_workers": 2, "cluster.worker.cpus": 2.0, "cluster.worker.gpus": 0.0,
                       "cluster.worker.memory_gb": None, "cluster.worker.custom": {},
                       "cluster.placement_strategy": "PACK", "run.name": "exp", "storage.path": "/shared/runs",
                       "checkpoint.keep_last": 2, "failure.max_failures": 3, "failure.retry_user_errors": True}
        load_config(ROOT / "conf/local.yaml", out)
        assert read(module.ScalingConfig(), module.RunConfig())[1] == []
    # v1's own settings: each one line, ignored (Ray's v1 trainer says each is deprecated).
    _, warnings = read(v1.ScalingConfig(trainer_resources={"CPU": 1}), v1.RunConfig(
        stop={"training_iteration": 3}, verbose=0, log_to_file=True, sync_config=SyncConfig(sync_artifacts=True),
        failure_config=v1.FailureConfig(fail_fast=True),
        checkpoint_config=v1.CheckpointConfig(checkpoint_frequency=2, checkpoint_at_end=True)))
    named = ["trainer_resources", "checkpoint_frequency", "checkpoint_at_end", "fail_fast", "stop", "verbose",
             "log_to_file", "sync_config"]
    assert len(warnings) == len(named) and all("\n" not in w and "is not mapped" in w for w in warnings)
    assert [next(n for n in named if f"({n}=...)" in w) for w in warnings] == named
