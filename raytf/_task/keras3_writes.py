"""Where a Keras 3 worker that is not the chief writes its ModelCheckpoint and BackupAndRestore saves (raytf issue 72):
apart from the chief's. Keras 3's callbacks know nothing of workers, and two writing one path corrupt it (a `.keras`
file silently, an h5 file with a lock error). Installed by _task/keras3.py's fit under MWMS of several workers; the
symbols wrapped are in the private-API table (KERAS3_OWN_WRITES): missing or changed, the fit is refused in one
line."""

from __future__ import annotations

import json
import logging
import os

from raytf._core import keras3, topology
from raytf._core import private_apis as apis
from raytf._task import keras3 as keras3_fit

log = logging.getLogger(__name__)

_apart: bool = False


def keep_writes_apart() -> None:
    """A worker that is not the chief writes its Keras 3 ModelCheckpoint and BackupAndRestore saves (every worker
    must: reading sync-on-read variables is collective) where they cannot collide with the chief's, as tf-keras has
    it: in its own directories (under the task's own root, tf_runtime.keep_own_writes) in place, elsewhere (a path
    both share) into a `workertemp_<index>` directory beside, removed at once; on such a path its BackupAndRestore
    only reads (its recovery from the previous backup copies nothing) and never deletes the chief's backup. Keras
    3's callbacks know nothing of workers: two writing one path corrupt it."""
    global _apart
    if _apart:
        return
    chief, index = chief_and_index()
    if chief:
        _apart = True
        return
    keras3_fit.require(apis.KERAS3_OWN_WRITES, keras3.unknown_callbacks_refusal)
    from raytf._task import tf_runtime

    checkpoint_cls, _ = apis.owner(apis.KERAS3_CHECKPOINT_SAVE)
    backup_cls, _ = apis.owner(apis.KERAS3_BACKUP_SAVE)
    temp = f"workertemp_{index}"

    checkpoint_save = checkpoint_cls._save_model

    def checkpoint_save_apart(self, epoch, batch, logs):
        made: list[str] = []
        path_of = self._get_file_path

        def apart(epoch, batch, logs):
            path = path_of(epoch, batch, logs)
            if tf_runtime.owns(path):
                return path
            made.append(os.path.join(os.path.dirname(path), temp))
            return os.path.join(made[-1], os.path.basename(path))

        self._get_file_path = apart
        try:
            return checkpoint_save(self, epoch, batch, logs)
        finally:
            del self._get_file_path
            for d in made:
                _remove(d)

    backup_begin, backup_save, backup_end = backup_cls.on_train_begin, backup_cls._save_model, backup_cls.on_train_end
    paths = ("backup_dir", "_weights_path", "_training_metadata_path", "_prev_weights_path",
             "_prev_training_metadata_path")

    def backup_begin_apart(self, logs=None):
        if tf_runtime.owns(self.backup_dir):
            return backup_begin(self, logs)
        try:
            return self._load_model()
        except OSError:
            # Keras's recovery copies the previous backup over the damaged one: on the chief's backup the chief
            # does that; this worker reads the previous one where it is.
            import tensorflow as tf

            if not tf.io.gfile.exists(self._prev_weights_path):
                raise
            kept = self._weights_path, self._training_metadata_path
            self._weights_path, self._training_metadata_path = (self._prev_weights_path,
                                                                self._prev_training_metadata_path)
            try:
                return self._load_model()
            finally:
                self._weights_path, self._training_metadata_path = kept

    def backup_save_apart(self):
        if tf_runtime.owns(self.backup_dir):
            return backup_save(self)
        kept = {name: getattr(self, name) for name in paths}
        d = os.path.join(self.backup_dir, temp)
        for name, value in kept.items():
            setattr(self, name, d if name == "backup_dir" else os.path.join(d, os.path.basename(value)))
        try:
            return backup_save(self)
        finally:
            for name, value in kept.items():
                setattr(self, name, value)
            _remove(d)

    def backup_end_apart(self, logs=None):
        if tf_runtime.owns(self.backup_dir):
            return backup_end(self, logs)
        return None  # (the chief's backup, which the chief deletes)

    checkpoint_cls._save_model = checkpoint_save_apart
    backup_cls.on_train_begin, backup_cls._save_model = backup_begin_apart, backup_save_apart
    backup_cls.on_train_end = backup_end_apart
    _apart = True


def _remove(path: str) -> None:
    """A worker's temporary save removed, wherever it is (tf.io.gfile: a local path or a bucket, as Keras writes)."""
    import tensorflow as tf

    try:
        if tf.io.gfile.exists(path):
            tf.io.gfile.rmtree(path)
    except (OSError, tf.errors.OpError) as e:
        log.warning("a worker's temporary Keras save %s was not removed: %s", path, e)


def chief_and_index() -> tuple[bool, int]:
    try:
        config = json.loads(os.environ.get("TF_CONFIG") or "{}")
        task = config.get("task") or {}
        role, index = str(task.get("type", "worker")), int(task.get("index", 0))
        return topology.is_chief(config.get("cluster") or {}, role, index), index
    except (ValueError, TypeError, AttributeError):
        return True, 0
