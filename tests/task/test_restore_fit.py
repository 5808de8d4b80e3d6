"""A resume that does not fit the model is named before the first step (raytf/_task/restore_fit.py, issue 71): the
checkpoint of a 2-hidden-layer model restored into 1, 2 and 3 hidden layers, with tf-keras (what tf.keras is in
every task) and with Keras 3 (`import keras`); a model or optimizer not built yet is no mismatch (TensorFlow restores
their variables when they are made); without the private proto class, the check is off with one warning."""

import logging

import pytest

from raytf._core import private_apis as apis

pytestmark = pytest.mark.timeout(180)


def _model(keras, outputs: int):
    """Flatten, Dense(3), then `outputs` Dense(1) layers (one more or one fewer keeps every other shape)."""
    tail = [keras.layers.Dense(1) for _ in range(outputs)]
    model = keras.Sequential([keras.Input((4,)), keras.layers.Flatten(), keras.layers.Dense(3), *tail])
    model.compile(keras.optimizers.Adam(0.01), "mse")
    return model


@pytest.fixture(scope="module")
def saved(tf, tmp_path_factory):
    """{library: (prefix, kernel)}: a checkpoint of a trained model of 2 Dense(1) outputs and its optimizer, and the
    trained kernel of its Dense(3)."""
    import keras

    x, y = tf.random.normal((16, 4), seed=1), tf.random.normal((16, 1), seed=2)
    out = {}
    for name, lib in (("tf_keras", tf.keras), ("keras3", keras)):
        model = _model(lib, 2)
        model.fit(x, y, epochs=1, verbose=0)
        prefix = str(tmp_path_factory.mktemp(name) / "ckpt")
        tf.train.Checkpoint(model=model, optimizer=model.optimizer).write(prefix)
        out[name] = prefix, model.layers[1].kernel.numpy()
    return out


def _writer(tf, tmp_path, model):
    from raytf._task.tf_runtime import CheckpointWriter

    return CheckpointWriter({"model": model, "optimizer": model.optimizer}, is_chief=True,
                            scratch_root=str(tmp_path))


@pytest.mark.parametrize("library", ["tf_keras", "keras3"])
def test_a_removed_or_added_layer_is_named_and_refused_the_same_model_resumes(tf, saved, tmp_path, library):
    import keras

    from raytf._task.restore_fit import CheckpointMismatch

    lib = tf.keras if library == "tf_keras" else keras
    prefix, kernel = saved[library]
    same = _model(lib, 2)
    _writer(tf, tmp_path, same).restore(prefix, "ckpt-a", partial=False)  # fits: restored, no error
    assert (same.layers[1].kernel.numpy() == kernel).all()

    with pytest.raises(CheckpointMismatch) as removed:
        _writer(tf, tmp_path, _model(lib, 1)).restore(prefix, "ckpt-a", partial=False)
    line = str(removed.value)
    assert line.startswith("ckpt-a does not fit the program's model")
    assert "the checkpoint holds 2 variables (" in line and "that the model lacks" in line
    assert "that the checkpoint lacks" not in line

    with pytest.raises(CheckpointMismatch) as added:
        _writer(tf, tmp_path, _model(lib, 3)).restore(prefix, "ckpt-a", partial=False)
    line = str(added.value)
    assert "the model has 2 variables (" in line and "that the checkpoint lacks" in line
    assert "that the model lacks" not in line
    assert "checkpoint.partial_restore=true" in line and "run.name=" in line and "\n" not in line
    assert added.value.failure_kind == "config"


def test_partial_restore_resumes_what_matches_and_warns_once(tf, saved, tmp_path, caplog):
    model = _model(tf.keras, 3)
    fresh = model.layers[-1].kernel.numpy().copy()
    writer = _writer(tf, tmp_path, model)
    with caplog.at_level(logging.WARNING):
        writer.restore(saved["tf_keras"][0], "ckpt-a", partial=True)
        writer.restore(saved["tf_keras"][0], "ckpt-a", partial=True)  # (an evaluator's next checkpoint: not again)
    said = [r.getMessage() for r in caplog.records if "partial_restore" in r.getMessage()]
    assert len(said) == 1 and said[0].startswith("resuming from ckpt-a anyway (checkpoint.partial_restore=true)")
    assert "the model has 2 variables" in said[0] and "Fix:" not in said[0]
    assert (model.layers[1].kernel.numpy() == saved["tf_keras"][1]).all()  # resumed
    assert (model.layers[-1].kernel.numpy() == fresh).all()  # the added layer: its fresh values


def test_a_model_not_built_yet_and_a_fresh_optimizer_are_no_mismatch(tf, saved, tmp_path):
    from raytf._task.restore_fit import check

    class Net(tf.keras.Model):  # subclassed: no variables until its first call
        def __init__(self):
            super().__init__()
            self.hidden = [tf.keras.layers.Dense(3) for _ in range(2)]
            self.out = tf.keras.layers.Dense(1)

        def call(self, x):
            for layer in self.hidden:
                x = layer(x)
            return self.out(x)

    net = Net()
    assert check(tf.train.Checkpoint(model=net, optimizer=tf.keras.optimizers.Adam()), saved["tf_keras"][0])
    built = _model(tf.keras, 2)  # built, its optimizer's variables not made yet (they are at the first step)
    assert check(tf.train.Checkpoint(model=built, optimizer=built.optimizer), saved["tf_keras"][0])


def test_without_the_proto_class_the_check_is_off_with_one_warning(tf, saved, tmp_path, monkeypatch, caplog):
    from raytf._task import restore_fit

    monkeypatch.setattr(apis, "SWITCHES", apis.Switches())
    real = apis.problem
    monkeypatch.setattr(apis, "problem", lambda api, *a: "is missing (AttributeError: Gone)"
                        if api is apis.CHECKPOINT_GRAPH else real(api, *a))
    with caplog.at_level(logging.WARNING):
        assert restore_fit.check(tf.train.Checkpoint(model=_model(tf.keras, 3)), saved["tf_keras"][0])
        assert restore_fit.check(tf.train.Checkpoint(model=_model(tf.keras, 3)), saved["tf_keras"][0])
    off = [r.getMessage() for r in caplog.records if "is off" in r.getMessage()]
    assert len(off) == 1 and "trackable_object_graph_pb2.TrackableObjectGraph is missing" in off[0]


def test_plain_variables_are_compared_too_and_the_checkpoints_own_counter_is_not_the_programs(tf, tmp_path):
    """ctx.restore(weights=tf.Variable(...)) as custom loops call it: a variable added since is named; the root's
    save_counter (made by a save(), absent from raytf's write()s) is bookkeeping, never a mismatch."""
    from raytf._task.restore_fit import check

    prefix = str(tmp_path / "ckpt")
    tf.train.Checkpoint(weights=tf.Variable(tf.zeros([3]))).write(prefix)
    live = tf.train.Checkpoint(weights=tf.Variable(tf.zeros([3])))
    live.save(str(tmp_path / "elsewhere" / "ckpt"))  # (now it has a save_counter)
    assert check(live, prefix)
    grown = check(tf.train.Checkpoint(weights=tf.Variable(tf.zeros([3])), bias=tf.Variable(0.0)), prefix)
    assert (grown.extra, grown.missing) == ((), ("bias",))
    tf.train.Checkpoint(weights=tf.Variable(tf.zeros([3])), bias=tf.Variable(0.0)).save(str(tmp_path / "two"))
    shrunk = check(tf.train.Checkpoint(weights=tf.Variable(tf.zeros([3]))), str(tmp_path / "two-1"))
    assert (shrunk.extra, shrunk.missing) == (("bias",), ())  # (its save_counter is no mismatch either)


def test_a_tf_module_an_evaluator_and_a_check_that_cannot_run(tf, saved, tmp_path, monkeypatch, caplog):
    """A variable removed from a tf.Module (an orbit-style program's) is named; an evaluator's model, given without
    the training's optimizer, fits (only what it has counts); a checkpoint the check cannot read (no object graph)
    turns the check off with one warning, never refuses the resume."""
    from raytf._task import restore_fit
    from raytf._task.tf_runtime import CheckpointWriter

    class Net(tf.Module):
        def __init__(self, names):
            super().__init__()
            for n in names:
                setattr(self, n, tf.Variable(1.0))

    prefix = str(tmp_path / "module")
    tf.train.Checkpoint(net=Net(["a", "b"])).write(prefix)
    fit = restore_fit.check(tf.train.Checkpoint(net=Net(["a"])), prefix)
    assert (fit.extra, fit.missing) == (("net/b",), ())

    keras = tf.keras  # an evaluator's model for predictions: built, never compiled (no optimizer anywhere)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Flatten(), keras.layers.Dense(3), keras.layers.Dense(1),
                              keras.layers.Dense(1)])
    evaluator = CheckpointWriter({"model": model}, is_chief=False, scratch_root=str(tmp_path))
    with pytest.raises(restore_fit.CheckpointMismatch):
        evaluator.restore(saved["tf_keras"][0], "ckpt-a", partial=False)  # (as training: the optimizer is lacking)
    evaluator.restore(saved["tf_keras"][0], "ckpt-a", partial=False, evaluator=True)
    assert (model.layers[1].kernel.numpy() == saved["tf_keras"][1]).all()

    monkeypatch.setattr(apis, "SWITCHES", apis.Switches())
    monkeypatch.setattr(restore_fit, "GRAPH_KEY", "_NOT_THERE")
    with caplog.at_level(logging.WARNING):
        assert restore_fit.check(tf.train.Checkpoint(net=Net(["a"])), prefix)
        assert restore_fit.check(tf.train.Checkpoint(net=Net(["a"])), prefix)
    off = [r.getMessage() for r in caplog.records if "is off" in r.getMessage()]
    assert len(off) == 1 and "NotFoundError" in off[0]
