"""TrainContext in this process under TensorFlow's default strategy, without Ray: counting, rows, collective
checkpoint writes uploaded and committed in order, resume, the Keras callback and the model export."""

import numpy as np
import pytest

from raytf._storage import RunDir
from raytf._task.context import TrainContext
from raytf.config import load_config

pytestmark = pytest.mark.timeout(120)


def _context(tf, tmp_path, *, epochs, resume_from=None, export_model=False, attempt=1, num_workers=1,
             max_workers=None, params=None):
    cfg = load_config({"train": {"entrypoint": "m:f", "epochs": epochs, "steps_per_epoch": 4, "params": params or {}},
                       "metrics": {"every_steps": 2}, "storage": {"path": str(tmp_path / "runs")},
                       "checkpoint": {"every_epochs": 1, "keep_last": 0, "export_model": export_model}})
    run_dir = RunDir(cfg.storage, "ctx")
    run_dir.makedirs()
    scratch = tmp_path / f"scratch-{attempt}"
    scratch.mkdir()
    events = []
    ctx = TrainContext(cfg=cfg, strategy=tf.distribute.get_strategy(), role="worker", index=0, rank=0,
                       is_chief=True, num_workers=num_workers, attempt=attempt, run_dir=run_dir,
                       emit=lambda kind, payload: events.append((kind, payload)), resume_from=resume_from,
                       scratch_dir=str(scratch), max_workers=max_workers)
    return ctx, run_dir, events


def test_custom_loop_commits_every_epoch_and_resumes_where_it_stopped(tf, tmp_path):
    ctx, run_dir, events = _context(tf, tmp_path, epochs=2)
    weights = tf.Variable(0.0)
    assert ctx.restore(weights=weights) == 0
    for _ in ctx.epoch_range():
        for _ in range(ctx.steps_per_epoch):
            weights.assign_add(1.0)
            ctx.step_end({"loss": weights})  # a tensor: read only on the steps that are reported
        ctx.epoch_end({"loss": float(weights)})
    ctx.finish()
    ctx.close()
    assert [p["step"] for k, p in events if k == "step"] == [1, 2, 4, 6, 8]
    assert [p["metrics"]["loss"] for k, p in events if k == "step"] == [1.0, 2.0, 4.0, 6.0, 8.0]
    assert [(p["epoch"], p["step"]) for k, p in events if k == "epoch"] == [(1, 4), (2, 8)]
    # Uploaded in order beside training, each announced once committed.
    assert [(p["epoch"], p["step"]) for k, p in events if k == "checkpoint"] == [(1, 4), (2, 8)]
    assert [(e.epoch, e.step, e.committed) for e in run_dir.checkpoints.list()] == [(1, 4, True), (2, 8, True)]

    latest = run_dir.checkpoints.latest()
    ctx2, _, events2 = _context(tf, tmp_path, epochs=3, resume_from=latest, attempt=2)
    restored = tf.Variable(0.0)
    assert ctx2.restore(weights=restored) == 2
    assert float(restored) == 8.0 and (ctx2.epoch, ctx2.step) == (2, 8)
    assert list(ctx2.epoch_range()) == [2]
    ctx2.step_end({"loss": 0.5})
    kind, row = events2[-1]
    assert (kind, row["epoch"], row["step"], row["metrics"]["loss"]) == ("step", 3, 9, 0.5)
    ctx2.close()


def test_keras_fit_reports_through_the_callback_and_exports_the_model(tf, tmp_path):
    import tf_keras

    ctx, run_dir, events = _context(tf, tmp_path, epochs=2, export_model=True)
    with ctx.strategy.scope():
        model = tf_keras.Sequential([tf_keras.Input(shape=(3,)), tf_keras.layers.Dense(1)])
        model.compile(optimizer="sgd", loss="mse")
    ctx.restore(model=model)
    x, y = np.ones((64, 3), "float32"), np.ones((64, 1), "float32")
    model.fit(x, y, batch_size=8, epochs=ctx.epochs, initial_epoch=ctx.initial_epoch,
              steps_per_epoch=ctx.steps_per_epoch, callbacks=ctx.keras_callbacks(), verbose=0)
    ctx.finish()
    ctx.close()
    assert [(p["epoch"], p["step"]) for k, p in events if k == "epoch"] == [(1, 4), (2, 8)]
    assert all("loss" in p["metrics"] for k, p in events if k in ("step", "epoch"))
    assert [p["step"] for k, p in events if k == "checkpoint"] == [4, 8]
    assert run_dir.exists("model/_COMMITTED.json")
    loaded = tf_keras.models.load_model(run_dir.path("model"))
    np.testing.assert_allclose(loaded.predict(x[:2], verbose=0), model.predict(x[:2], verbose=0), rtol=1e-6)


def test_the_keras_example_scales_its_rate_with_the_attempts_size_also_after_a_resume(tf, tmp_path):
    """examples/keras_cnn.py trains at lr x ctx.num_workers / ctx.max_workers (elastic training: an attempt with
    fewer workers has a smaller global batch). The optimizer's rate is a variable its checkpoints hold, so an
    attempt resuming at another size sets its own again after ctx.restore."""
    import os

    from examples.keras_cnn import train
    from raytf._core.checkpoints import TF_PREFIX
    from raytf._storage import CHECKPOINTS_DIR

    def saved_rate(run_dir, entry):
        reader = tf.train.load_checkpoint(os.path.join(run_dir.path(CHECKPOINTS_DIR, entry.dir), TF_PREFIX))
        return [float(reader.get_tensor(k)) for k in reader.get_variable_to_shape_map()
                if k.startswith("optimizer/_learning_rate/")]

    params = {"learning_rate": 0.01, "data": "synthetic"}
    ctx, run_dir, _ = _context(tf, tmp_path, epochs=1, num_workers=1, max_workers=2, params=params)
    assert (ctx.num_workers, ctx.max_workers) == (1, 2)
    train(ctx)  # 1 of 2 workers
    ctx.finish()
    ctx.close()
    smaller = run_dir.checkpoints.latest()
    assert saved_rate(run_dir, smaller) == [pytest.approx(0.005)]
    ctx2, _, _ = _context(tf, tmp_path, epochs=2, resume_from=smaller, attempt=2, num_workers=2, max_workers=2,
                          params=params)
    train(ctx2)  # grown back: the full rate, not the one the checkpoint restored
    ctx2.finish()
    ctx2.close()
    assert saved_rate(run_dir, run_dir.checkpoints.latest()) == [pytest.approx(0.01)]
    ctx3, _, _ = _context(tf, tmp_path / "plain", epochs=1, params=params)
    assert ctx3.max_workers == ctx3.num_workers == 1  # not given: the attempt's size (learning rate x 1.0)
    ctx3.close()


def test_raytf_report_in_a_training_function_is_a_row_at_the_contexts_count(tf, tmp_path):
    import raytf

    ctx, _, events = _context(tf, tmp_path, epochs=1)
    ctx.step_end()
    raytf.report({"lr": tf.constant(0.5)})
    assert events[-1] == ("step", {"epoch": 1, "step": 1, "metrics": {"lr": 0.5}})
    raytf.report({"acc": 0.9}, kind="epoch")
    assert events[-1] == ("epoch", {"epoch": 0, "step": 1, "metrics": {"acc": 0.9}})
    for script_only in ({"step": 3}, {"epoch": 1}, {"checkpoint": True}):
        with pytest.raises(ValueError, match="for scripts"):
            raytf.report({"loss": 1.0}, **script_only)
    ctx.close()
    raytf.report({"lr": 0.1})  # closed: back to a no-op
    assert len(events) == 3


def test_a_wrong_call_of_report_names_the_context_method_and_the_call_meant(tf, tmp_path):
    """`ctx.report(epoch=1, loss=0.5)` (raytf issue 54): the TypeError says TrainContext.report and its signature,
    not the class it inherits (`StepCounter.report() got an unexpected keyword argument`); a right call still
    reports."""
    ctx, _, events = _context(tf, tmp_path, epochs=1)
    with pytest.raises(TypeError) as raised:
        ctx.report(epoch=1, loss=0.5)
    text = str(raised.value)
    assert text.startswith("TrainContext.report(metrics=None, *, kind='step') takes the metrics as one dict")
    assert "keyword argument(s) epoch, loss" in text and "ctx.report({'loss': ...})" in text
    assert "StepCounter" not in text
    ctx.report({"val_loss": 0.4}, kind="eval")
    assert events[-1][0] == "eval" and events[-1][1]["metrics"] == {"val_loss": 0.4}
    ctx.close()
