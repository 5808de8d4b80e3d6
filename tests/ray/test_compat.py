"""Coming from Ray Train, and from a notebook: a function as a value (raytf.fit(train_fn=...), one defined in
__main__), and a Ray Train program run by raytf.compat.TensorflowTrainer (Ray's own TensorFlow tests and examples:
test_ray_train_cases.py).

A "function defined in __main__" here is code executed with `__name__ == "__main__"` (as a script or a notebook
cell is): cloudpickle sends such a function by value, and no task ever imports the driver's __main__."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import raytf
from raytf.errors import ConfigError

pytestmark = pytest.mark.ray


def as_main(source: str) -> dict:
    """The namespace of `source` run as a script's or a notebook's __main__ (its functions' __module__)."""
    namespace = {"__name__": "__main__"}
    exec(compile(source, "<__main__>", "exec"), namespace)
    return namespace


# A Ray Train program's loop, unchanged: Ray's context, dataset shard, Keras callback and a last report.
RAY_TRAIN_LOOP = '''
import ray.train

def train_func(config):
    import tensorflow as tf
    from ray.air.integrations.keras import ReportCheckpointCallback

    context = ray.train.get_context()
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    with strategy.scope():
        model = tf.keras.Sequential([tf.keras.Input(shape=(4,)), tf.keras.layers.Dense(1)])
        model.compile(optimizer=tf.keras.optimizers.SGD(config["lr"]), loss="mse")
    resumed = ray.train.get_checkpoint()
    shard = ray.train.get_dataset_shard("train")
    rows = sum(len(batch["y"]) for batch in shard.iter_batches(batch_size=16))  # one pass of this worker's share
    for _ in range(config["epochs"]):
        model.fit(shard.to_tf("x", "y", batch_size=config["batch"]), callbacks=[ReportCheckpointCallback()],
                  verbose=0)
    ray.train.report({"world_rank": context.get_world_rank(), "world_size": context.get_world_size(),
                      "local_rank": context.get_local_rank(), "local_world_size": context.get_local_world_size(),
                      "node_rank": context.get_node_rank(), "rows": rows, "resumed": resumed is not None,
                      "name_ok": context.get_experiment_name() == config["name"]})
'''


def _rows(n: int) -> list[dict]:
    return [{"x": np.full(4, i / n, "float32"), "y": float(i) / n} for i in range(n)]


@pytest.mark.slow  # step 2, beside Ray's own cases (tests/ray/test_ray_train_cases.py): step 1 is at its budget
@pytest.mark.timeout(180)
def test_a_ray_train_program_from_main_runs_on_raytf(tmp_path, ray_local, no_leaks):
    """The one-line switch: Ray's own ScalingConfig/RunConfig/CheckpointConfig, datasets=, and a loop defined in
    __main__ that calls ray.train.report (through Ray's Keras callback), get_checkpoint, get_context and
    get_dataset_shard; trainer.fit() returns Ray Train's Result."""
    import ray
    from ray.train import CheckpointConfig, RunConfig, ScalingConfig

    from raytf.compat import TensorflowTrainer

    train_func = as_main(RAY_TRAIN_LOOP)["train_func"]
    assert train_func.__module__ == "__main__"
    trainer = TensorflowTrainer(
        train_func, train_loop_config={"lr": 0.05, "epochs": 1, "batch": 8, "name": "compat"},
        scaling_config=ScalingConfig(num_workers=2, resources_per_worker={"CPU": 0.5}),
        run_config=RunConfig(name="compat", storage_path=str(tmp_path), checkpoint_config=CheckpointConfig(
            num_to_keep=1)),
        datasets={"train": ray.data.from_items(_rows(64))}, raytf_config=["cluster.standby=0"])
    result = trainer.fit()
    assert isinstance(result, ray.train.Result) and result.error is None and result.path == str(tmp_path / "compat")
    # Metrics from every rank: each report an epoch row; the last one says what each rank's context answered.
    df = result.raytf.metrics
    last = df[(df["kind"] == "epoch") & (df["epoch"] == 2)].sort_values("rank")
    assert list(last["world_rank"]) == [0, 1] and set(last["world_size"]) == {2}
    assert list(last["local_rank"]) == [0, 1] and set(last["local_world_size"]) == {2} and set(last["node_rank"]) == {0}
    assert set(last["rows"]) == {32} and set(last["resumed"]) == {0} and set(last["name_ok"]) == {1}
    epochs = df[(df["kind"] == "epoch") & (df["epoch"] == 1)]  # the Keras epoch's report, from both ranks
    assert sorted(epochs["rank"]) == [0, 1] and epochs["loss"].notna().all()
    assert (df["kind"] == "step").any()  # Keras fit's steps counted too (step rows, breakdown, heartbeats)
    # Ray's Result: the newest checkpoint, rank 0's metrics reported with it, every report of rank 0.
    (name,) = [p.name for p in (tmp_path / "compat" / "checkpoints").iterdir()]
    assert result.checkpoint.path.endswith(name) and name.startswith("ckpt-n00000001-e000001")
    files = set(os.listdir(result.checkpoint.path))
    manifest = json.loads((Path(result.checkpoint.path) / "_COMMITTED.json").read_text())
    assert "model.keras" in files and "model.keras" in json.dumps(manifest)
    assert set(result.metrics) == {"loss"} and len(result.metrics_dataframe) == 2
    assert [m for _, m in result.best_checkpoints] == [result.metrics]
    recorded = (tmp_path / "compat" / "config.yaml").read_text()
    assert "entrypoint: <function train_func defined in __main__>" in recorded and "ray_train: true" in recorded


@pytest.mark.slow  # step 2: the loop above written for Keras 3 (~20 s)
@pytest.mark.timeout(240)
def test_a_ray_train_loop_written_for_keras_3_runs_on_raytf(tmp_path, ray_local, no_leaks):
    """The same Ray Train loop with `import keras` (Keras 3), which Ray Train's TensorflowTrainer cannot train on
    two workers (ray-project/ray#47464): through raytf.compat it trains, its Keras steps counted and its epochs
    reported from both ranks, Ray's Keras callback's checkpoint committed (raytf issue 72)."""
    import ray
    from ray.train import RunConfig, ScalingConfig

    from raytf.compat import TensorflowTrainer

    loop = RAY_TRAIN_LOOP.replace("    import tensorflow as tf\n", "    import keras\n    import tensorflow as tf\n")
    loop = loop.replace("tf.keras.", "keras.")
    assert "tf.keras" not in loop and "import keras" in loop
    train_func = as_main(loop)["train_func"]
    trainer = TensorflowTrainer(
        train_func, train_loop_config={"lr": 0.05, "epochs": 2, "batch": 8, "name": "compat3"},
        scaling_config=ScalingConfig(num_workers=2, resources_per_worker={"CPU": 0.5}),
        run_config=RunConfig(name="compat3", storage_path=str(tmp_path)),
        datasets={"train": ray.data.from_items(_rows(64))}, raytf_config=["cluster.standby=0"])
    result = trainer.fit()
    assert result.error is None, result.error
    df = result.raytf.metrics
    epochs = df[(df["kind"] == "epoch") & df["loss"].notna()]
    assert sorted(epochs["rank"]) == [0, 0, 1, 1] and (df["kind"] == "step").any()
    assert "model.keras" in os.listdir(result.checkpoint.path)


MAIN_TRAIN = '''
def train(ctx):
    import numpy as np
    import tensorflow as tf

    x = np.linspace(0, 1, 256, dtype="float32").reshape(64, 4)
    data = tf.data.Dataset.from_tensor_slices((x, x.sum(axis=1))).repeat().batch(ctx.global_batch_size)
    with ctx.strategy.scope():
        model = tf.keras.Sequential([tf.keras.Input(shape=(4,)), tf.keras.layers.Dense(1)])
        model.compile(optimizer="sgd", loss="mse")
    ctx.restore(model=model, optimizer=model.optimizer)
    model.fit(data, epochs=ctx.epochs, initial_epoch=ctx.initial_epoch, steps_per_epoch=ctx.steps_per_epoch,
              callbacks=ctx.keras_callbacks(), verbose=0)
'''


@pytest.mark.timeout(180)
def test_train_fn_defined_in_main_trains_and_the_config_says_so(fast_cfg, no_leaks):
    """raytf.fit(cfg, train_fn=train) with `train` from __main__ (a script or a notebook cell): sent by value,
    trained; config.yaml records it, and that config alone is refused in one line (nothing started)."""
    train = as_main(MAIN_TRAIN)["train"]
    result = raytf.fit(fast_cfg("run.name=mainfn", "train.epochs=1", "train.steps_per_epoch=4"), train_fn=train,
                       quiet=True)
    assert result.status == "succeeded" and result.final_metrics["step"] == 4
    assert result.config.train.entrypoint == "<function train defined in __main__>"
    recorded = raytf.load_result(result.run_dir).config
    assert recorded.train.entrypoint == "<function train defined in __main__>"
    with pytest.raises(ConfigError) as refused:
        raytf.fit(recorded, ["run.name=mainfn-again"], quiet=True)
    assert "is a function a program gave raytf.fit(train_fn=...)" in str(refused.value)
    assert "\n" not in str(refused.value)


UNGUARDED_SCRIPT = """
import sys

import raytf

def train(ctx):
    import tensorflow as tf
    with ctx.strategy.scope():
        model = tf.keras.Sequential([tf.keras.Input(shape=(4,)), tf.keras.layers.Dense(1)])
        model.compile(optimizer="sgd", loss="mse")
    data = tf.data.Dataset.from_tensors((tf.ones([4]), tf.ones([]))).repeat().batch(ctx.global_batch_size)
    model.fit(data, epochs=1, steps_per_epoch=3, callbacks=ctx.keras_callbacks(), verbose=0)

def broken(ctx):
    raise ValueError("a bug in the training function")

cfg = raytf.load_config(sys.argv[1], sys.argv[2:])
print("first:", raytf.fit(cfg, ["run.name=script-ok"], train_fn=train, quiet=True).status, flush=True)
raytf.fit(cfg, ["run.name=script-bug"], train_fn=broken, quiet=True)
print("not reached")
"""


@pytest.mark.slow  # step 2: a script of its own (two runs), joining the session's Ray
@pytest.mark.timeout(300)
def test_a_script_without_a_main_guard_trains_and_its_failure_exits_1(tmp_path, ray_local, no_leaks):
    """The script's driver code is at module level (no `if __name__ == "__main__":`): the tasks get its functions
    by value and never import it (had they, it would run again in each task). A failing function raises
    TrainingFailedError out of the script: it exits 1, as CI pipelines and schedulers read it."""
    from tests.conftest import ROOT, state_address

    script = tmp_path / "train_script.py"
    script.write_text(UNGUARDED_SCRIPT)
    proc = subprocess.run(
        [sys.executable, str(script), str(ROOT / "conf/local.yaml"), f"storage.path={tmp_path}", "cluster.standby=0",
         f"ray.address={state_address()}"], cwd=tmp_path, capture_output=True, text=True, timeout=280)
    assert "first: succeeded" in proc.stdout, proc.stderr[-3000:]
    assert proc.returncode == 1 and "not reached" not in proc.stdout
    assert "raytf.errors.TrainingFailedError" in proc.stderr and "a bug in the training function" in proc.stderr
    assert json.loads((tmp_path / "script-bug" / "result.json").read_text())["status"] == "failed"


@pytest.mark.slow  # step 2: a relaunch and a failure of the path the default run trains once
@pytest.mark.timeout(420)
def test_a_ray_train_run_resumes_by_name_and_its_failure_raises(tmp_path, ray_local, no_leaks):
    """RunConfig(name=...) again resumes from the newest checkpoint (ray.train.get_checkpoint() has it); Ray
    Train's other Keras callback (ray.train.tensorflow.keras) works too; a loop that raises on rank 1 makes
    trainer.fit() raise Ray Train's TrainingFailedError (a WorkerGroupError), also raytf's."""
    import ray
    from ray.train import RunConfig, ScalingConfig

    from raytf.compat import TensorflowTrainer

    loop = as_main(RAY_TRAIN_LOOP.replace("ray.air.integrations.keras", "ray.train.tensorflow.keras"))["train_func"]

    def trainer(name, fn=loop):
        # A tuple is not YAML's: the config travels with the function (pickled), not in train.params.
        return TensorflowTrainer(
            fn, train_loop_config={"lr": 0.05, "epochs": 1, "batch": 8, "name": name, "shape": (4,)},
            scaling_config=ScalingConfig(num_workers=2, resources_per_worker={"CPU": 0.5}),
            run_config=RunConfig(name=name, storage_path=str(tmp_path)),
            datasets={"train": ray.data.from_items(_rows(32))}, raytf_config=["cluster.standby=0"])

    first = trainer("again").fit()
    again = trainer("again").fit()
    assert [a["resumed_from"] for a in again.raytf.attempts][-1] == Path(first.checkpoint.path).name
    final = again.raytf.metrics
    final = final[(final["kind"] == "epoch") & (final["attempt"] == 2)]
    assert set(final["resumed"].dropna()) == {1}  # get_checkpoint() gave the loop the first run's checkpoint
    assert len(again.best_checkpoints) == 2  # CheckpointConfig's default: every checkpoint kept
    assert again.raytf.config.train.params == {}  # (the loop got its config all the same: it trained)

    failing = as_main("import ray.train\n\ndef boom(config):\n"
                      "    if ray.train.get_context().get_world_rank() == 1:\n"
                      "        raise KeyError('no such feature')\n")["boom"]
    with pytest.raises(ray.train.TrainingFailedError) as raised:
        trainer("boom", failing).fit()
    e = raised.value
    assert isinstance(e, ray.train.WorkerGroupError) and isinstance(e, raytf.TrainingFailedError)
    assert list(e.worker_failures) == [1] and (e.rank, e.role, e.host) == (1, "worker", "127.0.0.1")
    assert "KeyError: 'no such feature'" in str(e) and "boom" in e.remote_traceback
    assert e.result.status == "failed" and e.result.error is e


@pytest.mark.bench  # a benchmark's smoke run (four trainings on a Ray of its own)
@pytest.mark.timeout(900)
def test_the_loss_difference_benchmark_shows_it_explained():
    """benchmarks/ray_train_loss.py --smoke: the same program and data (and initial weights) through Ray Train,
    raytf.compat and ctx.dataset at the per-replica batch that means Ray's to_tf batch take the same steps and end
    at the same loss; ctx.dataset given Ray's number takes half the steps per epoch and ends higher."""
    from tests.conftest import benchmark_smoke

    out = benchmark_smoke("benchmarks.ray_train_loss", timeout_s=860).stdout
    runs = {}
    for line in out.splitlines():
        if line.startswith("seed 0: ") and "steps/epoch" in line:
            name, _, rest = line.removeprefix("seed 0: ").partition(": ")
            steps, _, losses = rest.removeprefix("steps/epoch ").partition(", loss ")
            runs[name] = (int(steps), [float(v) for v in losses.split(" (")[0].split()])
    assert set(runs) == {"ray_train", "compat", "ctx_32", "ctx_16"}, out
    steps = {name: s for name, (s, _) in runs.items()}
    assert steps["ray_train"] == steps["compat"] == steps["ctx_16"] == 2 * steps["ctx_32"], steps
    final = {name: loss[-1] for name, (_, loss) in runs.items()}
    assert final["compat"] == pytest.approx(final["ray_train"], abs=0.01)
    assert final["ctx_16"] == pytest.approx(final["ray_train"], abs=0.01)
    assert final["ctx_32"] > final["ray_train"] + 0.005, final


EVALUATE = '''
def evaluate(ctx):
    import tensorflow as tf

    model = tf.keras.Sequential([tf.keras.Input(shape=(4,)), tf.keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    ctx.restore(model=model, optimizer=model.optimizer)
    for checkpoint in ctx.watch_checkpoints(poll_s=0.5):
        ctx.report({"seen_epoch": checkpoint.epoch}, kind="eval")
'''


@pytest.mark.slow  # step 2: the evaluator's variant of the default run's train_fn path
@pytest.mark.timeout(300)
def test_eval_fn_defined_in_main_evaluates_the_checkpoints(fast_cfg, no_leaks):
    """raytf.fit(cfg, train_fn=..., eval_fn=...): the side-car evaluator runs a function from __main__ too."""
    main = as_main(MAIN_TRAIN + EVALUATE)
    cfg = fast_cfg("run.name=mainev", "train.epochs=2", "train.steps_per_epoch=4", "cluster.worker.cpus=0.5")
    # (Given to fit as overrides: a config enabling the evaluator is validated with the eval_fn it records.)
    result = raytf.fit(cfg, ["cluster.evaluator.enabled=true", "cluster.evaluator.cpus=0.5"], train_fn=main["train"],
                       eval_fn=main["evaluate"], quiet=True)
    assert result.status == "succeeded", result.error
    assert result.config.train.eval_entrypoint == "<function evaluate defined in __main__>"
    seen = result.metrics
    assert seen[seen["role"] == "evaluator"]["seen_epoch"].max() == 2  # it saw the last checkpoint


# A Ray Train v1 program (RAY_TRAIN_V2_ENABLED=0, as Ray's CI still runs its TensorFlow tests): v1's config classes
# and, in the loop, v1's ray.train functions (the workers inherit the variable from the Ray the script starts).
V1_PROGRAM = '''
import json
import os
import sys
import tempfile

import numpy as np
import ray
import ray.air.config
import ray.train
from ray.train import Checkpoint, CheckpointConfig, RunConfig, ScalingConfig

from raytf.compat import TensorflowTrainer, TrainingFailedError

assert ScalingConfig is ray.air.config.ScalingConfig and RunConfig is ray.air.config.RunConfig  # v1's
assert issubclass(TrainingFailedError, ray.train.TrainingFailedError)  # v1's, which a v1 program catches


def train_func(config):
    import tensorflow as tf
    from ray.air.integrations.keras import ReportCheckpointCallback
    from ray.train._internal import session

    v1 = ray.train.report is session.report  # this worker bound Ray Train v1's functions
    context = ray.train.get_context()
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    with strategy.scope():
        model = tf.keras.Sequential([tf.keras.Input(shape=(4,)), tf.keras.layers.Dense(1)])
        model.compile(optimizer=tf.keras.optimizers.SGD(config["lr"]), loss="mse")
    resumed = ray.train.get_checkpoint()
    shard = ray.train.get_dataset_shard("train")
    model.fit(shard.to_tf("x", "y", batch_size=8), callbacks=[ReportCheckpointCallback()], verbose=0)
    with tempfile.TemporaryDirectory() as saved:
        with open(os.path.join(saved, "state.json"), "w") as f:
            json.dump({"epochs": 1}, f)
        mine = Checkpoint.from_directory(saved) if context.get_world_rank() == 0 else None
        ray.train.report({"v1": v1, "world_rank": context.get_world_rank(), "world_size": context.get_world_size(),
                          "local_world_size": context.get_local_world_size(), "node_rank": context.get_node_rank(),
                          "resumed": resumed is not None, "name_ok": context.get_experiment_name() == "v1run"},
                         checkpoint=mine)


ray.init(num_cpus=4)
rows = [{"x": np.full(4, i / 64, "float32"), "y": i / 64} for i in range(64)]
result = TensorflowTrainer(
    train_func, train_loop_config={"lr": 0.05},
    scaling_config=ScalingConfig(num_workers=2, resources_per_worker={"CPU": 0.5}),
    run_config=RunConfig(name="v1run", storage_path=sys.argv[1], checkpoint_config=CheckpointConfig(num_to_keep=2)),
    datasets={"train": ray.data.from_items(rows)}, raytf_config=["cluster.standby=0"]).fit()
print("RESULT", json.dumps({"ray_result": isinstance(result, ray.train.Result), "error": repr(result.error),
                            "metrics": result.metrics, "files": sorted(os.listdir(result.checkpoint.path)),
                            "kept": len(result.best_checkpoints)}))
'''


@pytest.mark.slow  # step 2: a Ray of the script's own (the variable must reach its workers), one Keras epoch
@pytest.mark.timeout(600)
def test_a_ray_train_v1_program_runs_on_raytf(tmp_path):
    """RAY_TRAIN_V2_ENABLED=0: v1's ScalingConfig/RunConfig/CheckpointConfig, and in the workers v1's
    ray.train.report (with a checkpoint, and through Ray's Keras callback), get_checkpoint, get_context and
    get_dataset_shard reach raytf: every rank's reports are the run's metrics, rank 0's checkpoints committed."""
    import pandas as pd

    script = tmp_path / "v1_program.py"
    script.write_text(V1_PROGRAM)
    # Its ray.init(num_cpus=4) starts a Ray of its own, whose workers inherit RAY_TRAIN_V2_ENABLED=0 (with no
    # address, Ray would join the cluster the machine's last `ray start` wrote to /tmp/ray/ray_current_cluster).
    env = {**os.environ, "RAY_TRAIN_V2_ENABLED": "0", "RAY_ADDRESS": "local", "RAY_AUTH_MODE": "token"}
    proc = subprocess.run([sys.executable, str(script), str(tmp_path / "runs")], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=560)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    (line,) = [x for x in proc.stdout.splitlines() if x.startswith("RESULT ")]
    result = json.loads(line.removeprefix("RESULT "))
    assert result["ray_result"] and result["error"] == "None" and result["kept"] == 2
    assert result["files"] == ["_COMMITTED.json", "state.json"]  # the loop's last report's checkpoint
    assert result["metrics"]["v1"] == 1 and result["metrics"]["name_ok"] == 1
    run = tmp_path / "runs" / "v1run"
    summary = json.loads((run / "result.json").read_text())
    assert summary["status"] == "succeeded" and summary["num_replicas_in_sync"] == 2
    assert len(summary["checkpoints"]) == 2 and summary["final_metrics"]["epoch"] == 2  # two reports, each an epoch
    df = pd.read_parquet(run / "metrics.parquet")
    epochs = df[df["kind"] == "epoch"]
    keras = epochs[epochs["epoch"] == 1]  # Ray's Keras callback's report, from both ranks
    assert sorted(keras["rank"]) == [0, 1] and keras["loss"].notna().all()
    last = epochs[epochs["epoch"] == 2].sort_values("rank")
    assert list(last["v1"]) == [1, 1] and list(last["world_rank"]) == [0, 1] and set(last["world_size"]) == {2}
    assert set(last["local_world_size"]) == {2} and set(last["node_rank"]) == {0}
    assert set(last["resumed"]) == {0} and set(last["name_ok"]) == {1}
    (keras_checkpoint,) = [p for p in (run / "checkpoints").iterdir() if "e000001" in p.name]
    assert "model.keras" in os.listdir(keras_checkpoint)


def test_a_ray_that_moved_ray_trains_seam_is_one_line(monkeypatch):
    """The private Ray APIs raytf.compat needs, checked on the driver before anything starts (no Ray started)."""
    from ray.train.v2._internal.execution import train_fn_utils

    from raytf._task import ray_train_private

    ray_train_private.check()  # Ray 2.60 has v2's seam
    monkeypatch.setenv("RAY_TRAIN_V2_ENABLED", "0")
    ray_train_private.check()  # and v1's: ray.train's functions are v1's here, and mapped too
    monkeypatch.delenv("RAY_TRAIN_V2_ENABLED")
    monkeypatch.delattr(train_fn_utils, "set_train_fn_utils")
    with pytest.raises(ray_train_private.RayTrainMoved) as moved:
        ray_train_private.check()
    message = str(moved.value)
    assert "moved Ray Train v2's private train_fn_utils" in message and "set_train_fn_utils" in message
    assert "Fix: pip install" in message and "\n" not in message
