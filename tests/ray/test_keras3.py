"""The first programs people bring (raytf issue 54): a Keras 3 program (`import keras`) on a cluster is refused before
its first step in one line that names Keras 3, the upstream issue and the fixes (exit 2, not retried), in script
mode and function mode; a failure whose message dumps a tensor is told without the values."""

import json
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


@pytest.mark.slow  # step 2 (a run of two workers importing Keras 3 beside TensorFlow: ~15 s)
@pytest.mark.timeout(240)
def test_a_keras_3_script_is_refused_before_its_first_step_in_one_line_exit_2(tmp_path, no_leaks):
    """The program a new user brings: `import keras` (Keras 3), MultiWorkerMirroredStrategy, Model.fit, as
    train.script on two workers. Without raytf it fails in its first step with TF's "Attempt to convert a value
    (PerReplica:{...})" and the input batch dumped (keras-team/keras#20585)."""
    from tests.conftest import ROOT, state_address

    script = tmp_path / "train_k3.py"
    script.write_text(KERAS3_SCRIPT)
    proc = subprocess.run(
        [sys.executable, "-m", "raytf.launch", "conf/local.yaml", "--quiet", "run.name=k3", f"storage.path={tmp_path}",
         f"train.script={script}", "train.entrypoint=", "cluster.standby=0", f"ray.address={state_address()}"],
        cwd=ROOT, capture_output=True, text=True, timeout=220)
    assert proc.returncode == 2, proc.stderr[-3000:]
    final = [line for line in proc.stderr.splitlines() if line.startswith("raytf: ")]
    assert len(final) == 1 and "Keras 3 (keras 3." in final[0] and "keras-team/keras#20585" in final[0], final
    assert "import tf_keras as keras" in proc.stderr and "PerReplica" not in proc.stderr
    result = json.loads((tmp_path / "k3" / "result.json").read_text())
    assert result["status"] == "failed" and len(result["attempts"]) == 1  # (a configuration error: not retried)
    assert result["attempts"][0]["cause"] == "config" and result["attempts"][0].get("first_step_at") is None


@pytest.mark.slow  # step 2: the function mode of the refusal above, and a dumped tensor in a function's failure
@pytest.mark.timeout(300)
def test_a_keras_3_function_is_refused_too_and_a_dumped_tensor_is_told_without_its_values(fast_cfg, no_leaks):
    import raytf

    with pytest.raises(raytf.TrainingFailedError) as raised:
        raytf.fit(fast_cfg("run.name=k3fn", "train.entrypoint=tests.train_fns:keras3_fit"), quiet=True)
    error = raised.value
    assert error.root.kind == "config" and "Keras 3 (keras 3." in str(error) and len(error.result.attempts) == 1

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
