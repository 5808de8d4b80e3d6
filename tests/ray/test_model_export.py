"""The trained model, exported by the run, loads and evaluates with plain tf_keras (no raytf)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

pytestmark = [pytest.mark.ray, pytest.mark.timeout(300)]

# One process (a TensorFlow import each, ~4 s of CPU here) for both: the model with plain tf_keras first (raytf not
# imported by then), then through raytf.load_result in and out of a strategy's scope.
EVALUATE = """
import json, sys
import tf_keras
from examples.data import digits
model = tf_keras.models.load_model(sys.argv[1])
_, (xv, yv) = digits(seed=0)
n = int(sys.argv[2])
loss, acc = model.evaluate(xv[:n], yv[:n], batch_size=n, verbose=0)
raytf_imported = "raytf" in sys.modules
import raytf, tensorflow as tf
r = raytf.load_result(sys.argv[3])
plain = r.load_model()
scoped = r.load_model(strategy=tf.distribute.MirroredStrategy())
same = plain.count_params() == scoped.count_params()
print(json.dumps({"accuracy": acc, "loss": loss, "raytf_imported": raytf_imported,
                  "loaded": type(plain).__module__.split(".")[0], "same": same}))
"""


@pytest.fixture(scope="module")
def scored(keras_run):
    """What EVALUATE printed of keras_run's exported model."""
    # The run validated on validation_steps global batches of 16 x 2 replicas (examples/keras_cnn.py).
    n = (359 // 32) * 32
    out = subprocess.run([sys.executable, "-c", EVALUATE, keras_run.model_path, str(n), keras_run.run_dir],
                         capture_output=True, text=True, cwd=ROOT, timeout=240)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_exported_model_matches_the_reported_accuracy(keras_run, scored):
    """The trained model, exported by the run, loads and evaluates with plain tf_keras (no raytf)."""
    result = keras_run
    assert result.model_path == f"{result.run_dir}/model"
    assert (Path(result.run_dir) / "model" / "saved_model.pb").exists()
    assert result.best_checkpoint in result.checkpoints
    assert scored["raytf_imported"] is False
    assert scored["accuracy"] == pytest.approx(result.final_metrics["val_accuracy"], abs=1e-6)


def test_result_load_model_in_and_out_of_a_strategy_scope(scored):
    assert (scored["loaded"], scored["same"]) == ("tf_keras", True)
