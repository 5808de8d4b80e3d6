"""What the script's child patches into TensorFlow before the script runs, so that an unmodified script reports to
raytf without knowing of it: every tf-keras Model.fit gets raytf's callback, and a tf.train.CheckpointManager save
into $RAYTF_CHECKPOINT_DIR syncs that directory. (child.py installs both, after TensorFlow's import.)"""

from __future__ import annotations

import functools
import inspect


def keras_fit(reporter) -> None:
    """Every tf-keras Model.fit gets raytf's callback, last, unless the script added one itself."""
    import tf_keras

    model_cls = tf_keras.Model
    original = model_cls.fit
    signature = inspect.signature(original)
    add = script_callback_adder(reporter)

    @functools.wraps(original)
    def fit(self, *args, **kwargs):
        bound = signature.bind(self, *args, **kwargs)
        bound.arguments["callbacks"] = add(bound.arguments.get("callbacks"))
        return original(*bound.args, **bound.kwargs)

    model_cls.fit = fit


def script_callback_adder(reporter):
    """What adds raytf's callback, last, to a fit's callbacks (a list, or either Keras's CallbackList), unless the
    script added one itself: tf-keras's fit (keras_fit) and Keras 3's (_task/keras3.py) call it. The callback is
    tf-keras's class; Keras 3's CallbackList calls its hooks as it calls its own callbacks'."""
    from raytf._task.keras_callback import ScriptCallback, appended

    return lambda callbacks: appended(callbacks, ScriptCallback(reporter), unless=ScriptCallback)


def checkpoint_manager(reporter) -> None:
    """A custom training loop's tf.train.CheckpointManager.save is a checkpoint too (TF's multi-worker custom loop
    tutorial saves that way, knowing nothing of raytf): once it has written one (its `checkpoint` state file last),
    the chief syncs $RAYTF_CHECKPOINT_DIR, as after a Keras epoch, named by the checkpoint's number where the script
    counts no steps raytf sees (orbit, the Model Garden). Saves elsewhere are the script's business.

    An asynchronous save (CheckpointOptions(enable_async=True), the Model Garden's default) returns before its files
    are written, and its state file and max_to_keep's pruning follow on the writer's thread: copied then, a
    checkpoint named ckpt-40 held no ckpt-40 files, or the copy failed on a file pruned meanwhile (raytf issue 55).
    The manager's own sync() waits for both."""
    import tensorflow as tf

    original = tf.train.CheckpointManager.save

    @functools.wraps(original)
    def save(self, *args, **kwargs):
        path = original(self, *args, **kwargs)
        if path is not None and reporter.owns(self.directory):
            if (wait := getattr(self, "sync", None)) is not None:  # (CheckpointManager.sync, where this TF has it)
                wait()
            reporter.sync(number=checkpoint_number(path))
        return path

    tf.train.CheckpointManager.save = save


def checkpoint_number(path: str) -> int | None:
    """The number a CheckpointManager gave the checkpoint at `path` (`.../ckpt-40`: 40), None without one."""
    tail = path.rstrip("/").rsplit("-", 1)
    return int(tail[1]) if len(tail) == 2 and tail[1].isdigit() else None
