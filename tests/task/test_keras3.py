"""Keras 3 in a task process (raytf issue 72), without Ray: the trainer's correction is applied only after its
source is recognised, and a moved or changed symbol refuses the fit in one line (the private-API table's fallback);
a worker that is not the chief writes its ModelCheckpoint and BackupAndRestore saves apart from the chief's, outside
its own directories, and leaves the chief's backup alone; one process's fit trains as Keras wrote it."""

import json

import numpy as np
import pytest

from raytf._core import keras3 as pure
from raytf._core import private_apis as apis

pytestmark = pytest.mark.timeout(180)


@pytest.fixture
def k3(tf, monkeypatch):
    """raytf/_task/keras3.py, fresh: whatever it patches in Keras is put back after the test."""
    import keras
    from keras.src.backend.tensorflow import trainer
    from keras.src.callbacks import backup_and_restore, model_checkpoint
    from keras.src.trainers import epoch_iterator

    from raytf._task import keras3, keras3_writes

    for owner, name in [(trainer.TensorFlowTrainer, "_maybe_symbolic_build"), (trainer, "reduce_per_replica"),
                        (model_checkpoint.ModelCheckpoint, "_save_model"),
                        (backup_and_restore.BackupAndRestore, "on_train_begin"),
                        (backup_and_restore.BackupAndRestore, "_save_model"),
                        (backup_and_restore.BackupAndRestore, "on_train_end"),
                        (epoch_iterator.EpochIterator, "_enumerate_iterator"),
                        (keras.Model, "fit"), (keras.Model, "evaluate"), (keras.Model, "predict")]:
        monkeypatch.setattr(owner, name, getattr(owner, name))
    for module, name, fresh in [(keras3, "_corrected", None), (keras3, "_skipping", False), (keras3, "_skip_next", 0),
                                (keras3, "_warned_batch_norm", False), (keras3_writes, "_apart", False)]:
        monkeypatch.setattr(module, name, fresh)
    apis.SWITCHES.reset()
    yield keras3
    apis.SWITCHES.reset()


def _small_fit(callbacks, epochs=2):
    import keras

    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    model.compile("sgd", "mse")
    x = np.random.default_rng(0).random((32, 4)).astype("float32")
    return model, model.fit(x, x[:, :1], batch_size=8, epochs=epochs, callbacks=callbacks, verbose=0)


def test_the_correction_is_applied_once_recognised_and_one_process_trains_as_keras_wrote_it(k3):
    from keras.src.backend.tensorflow import trainer

    original = trainer.reduce_per_replica
    assert k3.correct_trainer("3.15.1") is pure.Trainer.CORRECTABLE
    assert trainer.reduce_per_replica is not original and trainer.reduce_per_replica.__wrapped__ is original
    # The table still sees Keras's own code behind the stand-ins (a second process's check, a re-check).
    assert all(apis.problem(a) is None for a in apis.by_feature(apis.KERAS3_MWMS))
    _, history = _small_fit([])  # the default strategy: the stand-ins hand over to Keras's own code
    assert len(history.history["loss"]) == 2 and np.isfinite(history.history["loss"]).all()


def test_a_changed_symbol_refuses_the_fit_in_one_line(k3, monkeypatch):
    from keras.src.backend.tensorflow import trainer

    monkeypatch.setattr(trainer, "reduce_per_replica", lambda values, strategy: values)  # (as a Keras that changed it)
    with pytest.raises(k3.Keras3Unsupported) as e:
        k3.correct_trainer("3.15.1")
    line = str(e.value)
    assert "\n" not in line and "reduce_per_replica changed" in line and "keras 3.15.1" in line
    assert "import tf_keras as keras" in line and e.value.failure_kind == "config"
    assert k3._corrected is None  # (nothing corrected: the next fit asks again)


def test_lines_that_are_not_the_ones_known_refuse_the_fit_and_correct_nothing(k3, monkeypatch):
    from keras.src.backend.tensorflow import trainer

    original = trainer.reduce_per_replica
    real_source = k3._source
    # Keras's own source with its step-logs line edited, as a Keras that rewrote the line differently would have.
    monkeypatch.setattr(k3, "_source", lambda fn: real_source(fn).replace('strategy.reduce("MEAN", v, axis=0)',
                                                                          'strategy.reduce("MEAN", v, axis=1)'))
    with pytest.raises(k3.Keras3Unsupported, match="not the ones corrected"):
        k3.correct_trainer("3.15.1")
    assert trainer.reduce_per_replica is original


def test_a_worker_not_the_chief_writes_its_keras_3_saves_apart_and_keeps_the_chiefs_backup(k3, monkeypatch, tmp_path):
    import keras

    from raytf._task import tf_runtime
    from raytf._task.keras3_writes import keep_writes_apart

    monkeypatch.setenv("TF_CONFIG", json.dumps({"cluster": {"worker": ["h:1", "h:2"]},
                                                "task": {"type": "worker", "index": 1}}))
    own, shared = tmp_path / "own", tmp_path / "shared"
    monkeypatch.setattr(tf_runtime, "_own_root", str(own))
    (shared / "backup").mkdir(parents=True)
    (shared / "backup" / "training_metadata.json").write_text('{"epoch": 0, "batch": 0}')  # (the chief's)
    keep_writes_apart()
    callbacks = [keras.callbacks.ModelCheckpoint(str(shared / "model.keras")),
                 keras.callbacks.ModelCheckpoint(str(own / "model.keras")),
                 keras.callbacks.BackupAndRestore(str(shared / "backup")),
                 keras.callbacks.BackupAndRestore(str(own / "backup"), delete_checkpoint=False)]
    model, _ = _small_fit(callbacks)
    assert sorted(p.name for p in shared.iterdir()) == ["backup"]  # its shared save written apart, then removed
    assert sorted(p.name for p in (shared / "backup").iterdir()) == ["training_metadata.json"]  # the chief's, kept
    assert (shared / "backup" / "training_metadata.json").read_text() == '{"epoch": 0, "batch": 0}'
    assert keras.saving.load_model(own / "model.keras").count_params() == model.count_params()  # its own: in place
    assert json.loads((own / "backup" / "training_metadata.json").read_text())["epoch"] == 2


def test_the_chief_writes_where_the_program_says(k3, monkeypatch, tmp_path):
    import keras

    from raytf._task.keras3_writes import keep_writes_apart

    monkeypatch.setenv("TF_CONFIG", json.dumps({"cluster": {"worker": ["h:1", "h:2"]},
                                                "task": {"type": "worker", "index": 0}}))
    keep_writes_apart()
    _small_fit([keras.callbacks.ModelCheckpoint(str(tmp_path / "model.keras"))])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.keras"]


def test_step_rows_show_per_replica_means_for_both_kerases(k3):
    """tf-keras's "auto" reduction sums the replicas' batch logs, Keras 3's takes their mean (and so does raytf's
    correction under MWMS): raytf's callback divides only the sums (a Keras 3 step row was half its epoch row)."""
    import keras
    import tf_keras

    from raytf._task.keras_callback import log_scale

    k3_model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    tfk_model = tf_keras.Sequential([tf_keras.Input((4,)), tf_keras.layers.Dense(1)])
    assert log_scale(k3_model, 2) == 1.0 and log_scale(tfk_model, 2) == 0.5
    tfk_model.compile("sgd", "mse")
    tfk_model.distribute_reduction_method = "first"
    assert log_scale(tfk_model, 2) == 1.0
