"""The trained model, exported by the run, loads and evaluates with plain tf_keras (no raytf)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

pytestmark = [pytest.mark.ray, pytest.mark.timeout(300)]

EVALUATE = """
import json, sys
import tf_keras
from examples.data import digits
model = tf_keras.models.load_model(sys.argv[1])
_, (xv, yv) = digits(seed=0)
n = int(sys.argv[2])
loss, acc = model.evaluate(xv[:n], yv[:n], batch_size=n, verbose=0)
print(json.dumps({"accuracy": acc, "loss": loss, "raytf_imported": "raytf" in sys.modules}))
"""


def test_exported_model_matches_the_reported_accuracy(keras_run):
    result = keras_run
    assert result.model_path == f"{result.run_dir}/model"
    assert (Path(result.run_dir) / "model" / "saved_model.pb").exists()
    assert result.best_checkpoint in result.checkpoints
    # The run validated on validation_steps global batches of 16 x 2 replicas (examples/keras_cnn.py).
    n = (359 // 32) * 32
    out = subprocess.run([sys.executable, "-c", EVALUATE, result.model_path, str(n)], capture_output=True,
                         text=True, cwd=ROOT, timeout=180)
    assert out.returncode == 0, out.stderr[-2000:]
    scored = json.loads(out.stdout.strip().splitlines()[-1])
    assert scored["raytf_imported"] is False
    assert scored["accuracy"] == pytest.approx(result.final_metrics["val_accuracy"], abs=1e-6)


def test_result_load_model_in_and_out_of_a_strategy_scope(keras_run):
    result = keras_run
    code = f"""
import raytf, tensorflow as tf
r = raytf.load_result({result.run_dir!r})
plain = r.load_model()
scoped = r.load_model(strategy=tf.distribute.MirroredStrategy())
print(type(plain).__module__.split('.')[0], plain.count_params() == scoped.count_params())
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=180)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "tf_keras True"
