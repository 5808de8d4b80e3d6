"""The first programs people bring (raytf issues 54 and 72): a Keras 3 program (`import keras`) trains under
MultiWorkerMirroredStrategy on two workers, exactly as one process does, as a script and as a training function;
what cannot train (ParameterServerStrategy, steps_per_execution > 1) is refused before its first step in one line
(exit 2, not retried, no traceback through raytf's frames); a failure whose message dumps a tensor is told without
the values."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

KERAS3_SCRIPT = '''
import numpy as np
import tensorflow as tf
import keras

strategy = tf.distribute.MultiWorkerMirroredStrategy()
with strategy.scope():
    model = keras.Sequential([keras.Input((28, 28)), keras.layers.Flatten(), keras.layers.Dense(10)])
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
x, y = np.random.rand(64, 28, 28).astype("float32"), np.random.randint(0, 10, 64)
model.fit(tf.data.Dataset.from_tensor_slices((x, y)).batch(16), epochs=1)
'''


def _launch(tmp_path, script_text, *overrides):
    from tests.conftest import ROOT, state_address

    script = tmp_path / "train_k3.py"
    script.write_text(script_text)
    return subprocess.run(
        [sys.executable, "-m", "raytf.launch", "conf/local.yaml", "--quiet", f"storage.path={tmp_path}",
         f"train.script={script}", "train.entrypoint=", "cluster.standby=0", f"ray.address={state_address()}",
         *overrides],
        cwd=ROOT, capture_output=True, text=True, timeout=220)


@pytest.mark.slow  # step 2 (a run of two workers importing Keras 3 beside TensorFlow: ~15 s)
@pytest.mark.timeout(240)
def test_a_keras_3_script_trains_on_two_workers_and_steps_per_execution_is_refused_in_one_line(tmp_path, no_leaks):
    """The program a new user brings: `import keras` (Keras 3), MultiWorkerMirroredStrategy, Model.fit, as
    train.script on two workers. Without raytf it fails in its first step with TF's "Attempt to convert a value
    (PerReplica:{...})" and the input batch dumped (keras-team/keras#20585). Its epochs are raytf's rows. The same
    program compiled with steps_per_execution=2 is refused: one line, exit 2, not retried, no traceback."""
    proc = _launch(tmp_path, KERAS3_SCRIPT, "run.name=k3")
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads((tmp_path / "k3" / "result.json").read_text())
    assert result["status"] == "succeeded" and len(result["attempts"]) == 1
    import pandas as pd

    metrics = pd.read_parquet(tmp_path / "k3" / "metrics.parquet")
    epochs = metrics[metrics["kind"] == "epoch"]
    assert sorted(epochs["rank"]) == [0, 1] and epochs["loss"].notna().all(), epochs

    proc = _launch(tmp_path, KERAS3_SCRIPT.replace('keras.losses.SparseCategoricalCrossentropy(from_logits=True))',
                                                   'keras.losses.SparseCategoricalCrossentropy(from_logits=True), '
                                                   'steps_per_execution=2)'), "run.name=k3spe")
    assert proc.returncode == 2, proc.stderr[-3000:]
    final = [line for line in proc.stderr.splitlines() if line.startswith("raytf: ")]
    assert len(final) == 1 and "steps_per_execution=2" in final[0] and "keras-team/keras#19246" in final[0], final
    assert proc.stderr.count("steps_per_execution=2 under") == 1, proc.stderr[-3000:]  # (shown once)
    assert "Traceback" not in proc.stderr and "PerReplica" not in proc.stderr, proc.stderr[-3000:]
    result = json.loads((tmp_path / "k3spe" / "result.json").read_text())
    assert result["status"] == "failed" and len(result["attempts"]) == 1  # (a configuration error: not retried)
    assert result["attempts"][0]["cause"] == "config" and result["attempts"][0].get("first_step_at") is None


def _exact(run_dir, rank: int) -> dict:
    return json.loads((Path(run_dir) / f"logs/worker{rank}-attempt1/exact.json").read_text())


def _max_difference(a: list, b: list) -> float:
    import numpy as np

    return max(float(np.max(np.abs(np.asarray(x) - np.asarray(y)))) for x, y in zip(a, b, strict=True))


@pytest.mark.slow  # step 2: a run of one worker and one of two, and a reload in a fresh process (~50 s)
@pytest.mark.timeout(400)
def test_a_keras_3_function_trains_on_two_workers_exactly_as_one_process_and_its_model_reloads(fast_cfg, tmp_path,
                                                                                               no_leaks):
    """Two workers against one process, the same global batch (32) and seed: weights within 1e-5, both ranks'
    equal, evaluate's loss the same everywhere; the ModelCheckpoint both ranks write to one shared path holds the
    chief's model (the other's save kept apart, then removed), which plain keras.saving.load_model reloads in a
    fresh process to predict what the trained model predicted."""
    import raytf

    shared = tmp_path / "shared"
    one = raytf.fit(fast_cfg("run.name=k3one", "cluster.num_workers=1", "train.entrypoint=tests.train_fns:keras3_fit"),
                    quiet=True)
    two = raytf.fit(fast_cfg("run.name=k3two", "train.entrypoint=tests.train_fns:keras3_fit",
                             f"train.params.shared_dir={shared}"), quiet=True)
    assert one.status == two.status == "succeeded", (one.error, two.error)
    alone, rank0, rank1 = _exact(one.run_dir, 0), _exact(two.run_dir, 0), _exact(two.run_dir, 1)
    assert _max_difference(alone["weights"], rank0["weights"]) < 1e-5
    assert _max_difference(rank0["weights"], rank1["weights"]) == 0.0
    assert abs(alone["loss"] - rank0["loss"]) < 1e-5 and rank0["loss"] == rank1["loss"]
    epochs = two.metrics[two.metrics["kind"] == "epoch"]
    assert sorted(epochs["rank"]) == [0, 0, 1, 1] and two.checkpoints  # (raytf's rows and commits)
    # A step row at an epoch's last step shows the epoch's own loss (Keras 3's step logs are the replicas' mean:
    # they were shown halved, as tf-keras's sums are divided).
    rows = two.metrics[two.metrics["rank"] == 0].set_index(["kind", "step"])["loss"]
    assert abs(rows[("step", 8)] - rows[("epoch", 8)]) <= 1e-6 * abs(rows[("epoch", 8)]), rows
    assert sorted(p.name for p in shared.iterdir()) == ["model.keras"]  # (no workertemp_1 left)
    probe = ("import json, sys, numpy as np, keras\n"
             "x = np.random.default_rng(0).random((256, 8)).astype('float32')[:8]\n"
             "print(json.dumps(keras.saving.load_model(sys.argv[1]).predict(x, verbose=0).tolist()))")
    env = {k: v for k, v in os.environ.items() if k != "TF_USE_LEGACY_KERAS"}
    reloaded = subprocess.run([sys.executable, "-c", probe, str(shared / "model.keras")], capture_output=True,
                              text=True, timeout=120, env={**env, "TF_CPP_MIN_LOG_LEVEL": "3"})
    assert reloaded.returncode == 0, reloaded.stderr[-2000:]
    assert _max_difference(json.loads(reloaded.stdout.splitlines()[-1]), rank0["predicted"]) < 1e-6


@pytest.mark.slow  # step 2: Keras 3 under ParameterServerStrategy refused, and a dumped tensor in a function's failure
@pytest.mark.timeout(300)
def test_keras_3_under_parameter_server_is_refused_and_a_dumped_tensor_is_told_without_its_values(fast_cfg, ps_cfg,
                                                                                                  no_leaks):
    import raytf

    with pytest.raises(raytf.TrainingFailedError) as raised:
        raytf.fit(ps_cfg("run.name=k3ps", "train.entrypoint=tests.train_fns:keras3_fit"), quiet=True)
    error = raised.value
    assert error.root.kind == "config" and len(error.result.attempts) == 1, error
    assert "Keras 3 (keras 3." in str(error) and "under ParameterServerStrategy" in str(error)
    assert "cluster.strategy=multi_worker_mirrored" in str(error)
    # One line, then where in the program: no frame of raytf's own (its fit wrapper raised it).
    line, *where = error.root.message.splitlines()
    assert line.startswith("Keras3Unsupported: Keras 3") and all("raytf/" not in w for w in where), where

    with pytest.raises(raytf.TrainingFailedError) as raised:
        raytf.fit(fast_cfg("run.name=dump", "train.entrypoint=tests.train_fns:dumps_a_tensor"), quiet=True)
    root = raised.value.root
    lines = root.message.splitlines()
    assert lines[0].startswith("ValueError: Attempt to convert a value (<tf.Tensor: shape=(16, 28, 28)")
    assert len(lines) <= 6 and "numpy=" not in root.message, root.message
    assert any('tests/train_fns.py", line' in line and "in dumps_a_tensor" in line for line in lines), lines
    assert "numpy=" in root.remote_traceback  # (the whole of it is kept, as in the task's log)
    # The brief's "more line(s) of the message in the task's log" are there (raytf issue 71: they were not).
    assert "more line(s) of the message in the task's log" in root.message
    log = Path(raised.value.result.run_dir, f"logs/worker{root.rank}-attempt1.log").read_text(errors="replace")
    assert "numpy=" in log and "Traceback (most recent call last)" in log


@pytest.mark.ray
@pytest.mark.slow  # step 2: a Keras 3 script's run and its retry (~35 s)
@pytest.mark.timeout(400)
def test_a_keras_3_script_killed_after_a_commit_resumes_from_its_backup_on_every_worker(tmp_path, no_leaks):
    """examples/keras3_mwms.py (conf/keras3.yaml), unmodified: worker 1 killed after a commit; the retry's
    BackupAndRestore (Keras 3's, under $RAYTF_CHECKPOINT_DIR) resumes at the committed epoch on both workers, the
    run finishes, and every epoch is a metrics row."""
    import raytf
    from tests import documented
    from tests.conftest import kill_at_a_commit_before

    killed: list[int] = []
    epochs = 6

    cfg = documented.config(
        "python -m raytf.launch conf/keras3.yaml", f"storage.path={tmp_path / 'runs'}", "run.name=k3kill",
        "metrics.flush_interval_s=0",
        f"train.args=[--epochs,'{epochs}',--steps-per-epoch,'10',--checkpoint-dir,'{{checkpoint_dir}}/ckpt',"
        "--backup-dir,'{checkpoint_dir}/backup']")
    result = raytf.fit(cfg, quiet=True, on_event=kill_at_a_commit_before(epochs, "raytf:k3kill:worker:1", killed))
    assert killed, f"no commit was seen before epoch {epochs}'s"
    assert result.status == "succeeded", result.error
    assert [a["cause"] for a in result.attempts] == ["system", None], result.attempts
    df = result.metrics
    rows = df[(df["kind"] == "epoch") & (df["rank"] == 0)]
    resumed = rows[rows["attempt"] == 2]["epoch"]
    assert resumed.min() > 1 and resumed.max() == epochs, rows[["attempt", "epoch"]]  # (not from scratch)
    assert set(rows["epoch"]) == set(range(1, epochs + 1))
    committed = [Path(c) for c in result.checkpoints]
    assert any((c / "backup" / "training_metadata.json").exists() for c in committed[:-1]), committed
    assert (Path(result.run_dir) / "workdir/worker0/saved_model/model.keras").exists()


@pytest.mark.slow  # step 2: two 2-worker runs (~45 s)
@pytest.mark.timeout(400)
def test_batch_normalization_that_does_not_synchronize_is_said_once_and_synchronized_is_exact(fast_cfg, no_leaks):
    """Keras 3's BatchNormalization under MWMS keeps each worker's moving statistics (tf-keras averages them): the
    ranks' differ, and the chief says once how to get them averaged (synchronized=True), which makes them equal."""

    import raytf

    runs = {mode: raytf.fit(fast_cfg(f"run.name=bn{mode}", "train.entrypoint=tests.train_fns:keras3_fit",
                                     f"train.params.batch_norm={mode}"), quiet=True) for mode in ("local", "sync")}
    apart = {}
    for mode, result in runs.items():
        assert result.status == "succeeded", result.error
        rank0, rank1 = _exact(result.run_dir, 0), _exact(result.run_dir, 1)
        apart[mode] = _max_difference(rank0["weights"], rank1["weights"])
        logs = [(Path(result.run_dir) / f"logs/worker{r}-attempt1.log").read_text() for r in (0, 1)]
        told = [log.count("BatchNormalization(synchronized=True)") for log in logs]
        assert told == ([1, 0] if mode == "local" else [0, 0]), (mode, told)
    print(f"max |rank 0 - rank 1| with BatchNormalization: local {apart['local']:.2e}, synchronized "
          f"{apart['sync']:.2e}")
    assert apart["local"] > 1e-4 and apart["sync"] == 0.0, apart
