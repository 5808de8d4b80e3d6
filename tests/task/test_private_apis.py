"""The private APIs of TensorFlow, tf-keras and Ray that raytf touches (raytf/_core/private_apis.py), in this
process with the installed versions: every one is there and unchanged (an upgrade fails this test, not a user's
run), and the task's features do without theirs: the breakdown turns off with one warning while Keras trains on,
exact resume and own checkpoint writes refuse at start, the iterator teardown stays where TF put it."""

import importlib
import logging

import pytest

from raytf._core import private_apis as apis

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(autouse=True)
def fresh_switches():
    apis.SWITCHES.reset()
    yield
    apis.SWITCHES.reset()


def _minor(version: str) -> str:
    return ".".join(version.split(".")[:2])


def test_every_private_symbol_is_there_in_the_installed_versions(tf):
    for package in ("tf_keras", "ray", "ray.data"):  # (TensorFlow is: the `tf` fixture)
        importlib.import_module(package)
    problems = {a.dotted: apis.problem(a) for a in apis.APIS}
    assert {k: v for k, v in problems.items() if v is not None} == {}
    # Pinned: a new TensorFlow, tf-keras or Ray fails here until raytf/_core/private_apis.py is checked against it
    # (its table, the symbols' use in raytf) and VERIFIED says so.
    installed = {p: _minor(apis.version(p)) for p in apis.VERIFIED}
    assert installed == apis.VERIFIED, "check raytf/_core/private_apis.py against these versions, then update VERIFIED"


def _warnings(caplog, text):
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and text in r.getMessage()]


def test_without_a_breakdown_symbol_the_breakdown_is_off_and_keras_trains_on(tf, monkeypatch, caplog):
    from tensorflow.python.distribute import cross_device_utils

    from raytf._core.breakdown import STEP_TIME
    from raytf._task import timing

    monkeypatch.setattr(timing, "_installed", False)
    monkeypatch.delattr(cross_device_utils.CollectiveReplicaLauncher, "all_reduce")  # as a TF that moved it
    split = timing.split(True)
    assert split.row(2.0, 4) == {STEP_TIME: 0.5}  # step time only: nothing else measured
    split = timing.split(True)  # (a second context in the process: no second warning)
    lines = _warnings(caplog, "CollectiveReplicaLauncher.all_reduce")
    assert len(lines) == 1 and "step-time breakdown" in lines[0] and "is off" in lines[0]
    model = tf.keras.Sequential([tf.keras.layers.Input(shape=(4,)), tf.keras.layers.Dense(1)])
    model.compile("sgd", "mse")
    data = tf.data.Dataset.from_tensor_slices(([[1.0] * 4] * 8, [[0.0]] * 8)).batch(2).prefetch(tf.data.AUTOTUNE)
    history = model.fit(data, epochs=1, verbose=0)
    assert len(history.history["loss"]) == 1 and timing.totals() == {}


def test_without_exact_resume_or_own_writes_the_task_refuses_at_start(tf, monkeypatch, tmp_path):
    import tf_keras
    from tf_keras.src.distribute import distributed_file_utils as dfu

    from raytf._core.failure import CONFIG
    from raytf._task import tf_runtime
    from raytf._task.keras_callback import RaytfCallback, ScriptCallback

    monkeypatch.delattr(tf_keras.src.engine.training.Model, "_maybe_load_initial_counters_from_ckpt")
    with pytest.raises(apis.PrivateApiMissing) as e:
        RaytfCallback(ctx=None)  # what ctx.keras_callbacks() makes, before fit
    assert e.value.failure_kind == CONFIG and "\n" not in str(e.value)
    line = str(e.value)
    assert f"tf_keras {tf_keras.__version__}" in line and "_maybe_load_initial_counters_from_ckpt" in line
    ScriptCallback(ctx=None)  # a script's fit resumes as the script says: not refused
    monkeypatch.delattr(dfu, "write_dirpath")
    with pytest.raises(apis.PrivateApiMissing, match=r"distributed_file_utils\.write_dirpath is missing"):
        tf_runtime.keep_own_writes(str(tmp_path))


def test_without_tensor_logs_the_callback_takes_numpy_logs(tf, monkeypatch, caplog):
    import tf_keras

    from raytf._task.keras_callback import RaytfCallback

    def __init__(self, callbacks=None, **kwargs):  # a tf-keras that no longer reads the flag
        self.callbacks = list(callbacks or [])

    monkeypatch.setattr(tf_keras.src.callbacks.CallbackList, "__init__", __init__)
    assert getattr(RaytfCallback(ctx=None), "_supports_tf_logs", False) is False
    assert len(_warnings(caplog, "CallbackList.__init__")) == 1


def test_iterators_are_torn_down_off_the_caller_and_not_without_the_symbol(tf, monkeypatch, caplog):
    from tensorflow.python.data.ops import iterator_ops

    from raytf._task import tfdata

    assert tfdata.install()  # (the tier's `tf` fixture configured TF as a task does: installed already)
    before = tfdata.deferred
    it = iter(tf.data.Dataset.range(100).prefetch(tf.data.AUTOTUNE))
    assert [int(next(it)) for _ in range(3)] == [0, 1, 2]
    del it
    assert tfdata.deferred == before + 1 and tfdata.wait(timeout_s=65)
    monkeypatch.setattr(tfdata, "_installed", False)
    monkeypatch.delattr(iterator_ops.OwnedIterator, "_create_iterator")
    assert tfdata.install() is False
    assert len(_warnings(caplog, "OwnedIterator._create_iterator")) == 1
