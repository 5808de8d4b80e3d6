"""The part of raytf's private-API table (_core/private_api_table.py, which includes it) that Keras 3 on several
workers rests on (raytf issue 72, _task/keras3.py): the two lines of Keras's TensorFlow trainer corrected, the exact
mid-epoch resume, a worker's own checkpoint writes. Every one is required: without it, the fit is refused before its
first step in one line. Pure data."""

from __future__ import annotations

from raytf._core.private_api_record import Feature, PrivateApi

KERAS3_MWMS = Feature(
    "keras3_mwms", "Keras 3's Model.fit under MultiWorkerMirroredStrategy of several workers (its trainer corrected)",
    "Keras 3's fit fails in its first step there (keras-team/keras#20585): refused before it, in one line "
    "(Keras3Unsupported), naming tf-keras", required=True)
KERAS3_RESUME = Feature(
    "keras3_resume", "exact Keras 3 resume mid-epoch (ctx.keras_callbacks())",
    "a Keras 3 fit resumed from a checkpoint taken within an epoch would train that epoch's saved steps again: "
    "refused before its first step", required=True)
KERAS3_OWN_WRITES = Feature(
    "keras3_own_writes", "a Keras 3 worker's ModelCheckpoint/BackupAndRestore saves kept apart from the chief's",
    "two workers would write one checkpoint path (a corrupt file): refused before the first step, in one line",
    required=True)

# -- Keras 3's fit under MWMS of several workers: its TensorFlow trainer's two lines corrected (_task/keras3.py)
_K3 = "raytf/_task/keras3.py"
_K3T = "keras.src.backend.tensorflow.trainer"
KERAS3_SYMBOLIC_BUILD = PrivateApi(
    f"{_K3T}:TensorFlowTrainer._maybe_symbolic_build", KERAS3_MWMS,
    "replaced: shapes from a local replica's batch, not the tuple reduced whole (fails under MWMS); its source is "
    "checked for the line corrected", _K3, params=("self", "iterator", "data_batch"), uses=("_symbolic_build",))
KERAS3_FIT = PrivateApi(
    f"{_K3T}:TensorFlowTrainer.fit", KERAS3_MWMS, "calls the above before its first step", _K3,
    uses=("_maybe_symbolic_build",))
KERAS3_REDUCE_PER_REPLICA = PrivateApi(
    f"{_K3T}:reduce_per_replica", KERAS3_MWMS,
    "replaced (a module global): step logs reduced with axis=None, not 0 (tensorflow/tensorflow#72388); its source "
    "is checked for the line corrected", _K3, params=("values", "strategy", "reduction"))
KERAS3_MAKE_FUNCTION = PrivateApi(
    f"{_K3T}:TensorFlowTrainer._make_function", KERAS3_MWMS,
    "the train and test steps' maker: must look reduce_per_replica up as a global at each call", _K3,
    params=("self", "step_function"), uses=("reduce_per_replica",))
KERAS3_MULTI_WORKER = PrivateApi(
    f"{_K3T}:_collective_all_reduce_multi_worker", KERAS3_MWMS,
    "Keras's own test for MWMS of several workers: the stand-ins above correct only there", _K3, params=("strategy",))
KERAS3_TREE = PrivateApi(f"{_K3T}:tree", KERAS3_MWMS, "Keras's map over a structure, as the trainer maps", _K3)
# -- exact Keras 3 resume mid-epoch
KERAS3_EPOCH_STEPS = PrivateApi(
    "keras.src.trainers.epoch_iterator:EpochIterator._enumerate_iterator", KERAS3_RESUME,
    "wrapped: the first epoch after a mid-epoch resume skips the steps trained (without taking their batches)", _K3,
    params=("self",), uses=("steps_per_epoch", "_current_iterator"))
KERAS3_EPOCH_ITER = PrivateApi(
    "keras.src.trainers.epoch_iterator:EpochIterator.__iter__", KERAS3_RESUME,
    "must start each epoch from the above", _K3, uses=("_enumerate_iterator",))
# -- a Keras 3 worker's own checkpoint writes
_K3W = "raytf/_task/keras3_writes.py"
KERAS3_CHECKPOINT_SAVE = PrivateApi(
    "keras.src.callbacks.model_checkpoint:ModelCheckpoint._save_model", KERAS3_OWN_WRITES,
    "wrapped on a worker that is not the chief: its path made its own (workertemp_<index>) outside its directories",
    _K3W, params=("self", "epoch", "batch", "logs"), uses=("_get_file_path",))
KERAS3_CHECKPOINT_PATH = PrivateApi(
    "keras.src.callbacks.model_checkpoint:ModelCheckpoint._get_file_path", KERAS3_OWN_WRITES,
    "the path the above writes, shadowed for the call", _K3W, params=("self", "epoch", "batch", "logs"))
KERAS3_BACKUP_SAVE = PrivateApi(
    "keras.src.callbacks.backup_and_restore:BackupAndRestore._save_model", KERAS3_OWN_WRITES,
    "wrapped on a worker that is not the chief: its paths made its own for the call", _K3W, params=("self",),
    uses=("backup_dir", "_weights_path", "_training_metadata_path", "_prev_weights_path",
          "_prev_training_metadata_path"))
KERAS3_BACKUP_BEGIN = PrivateApi(
    "keras.src.callbacks.backup_and_restore:BackupAndRestore.on_train_begin", KERAS3_OWN_WRITES,
    "wrapped on a worker that is not the chief: on a shared backup it reads, its recovery copies nothing", _K3W,
    params=("self", "logs"), uses=("_load_model", "_prev_weights_path"))
KERAS3_BACKUP_LOAD = PrivateApi(
    "keras.src.callbacks.backup_and_restore:BackupAndRestore._load_model", KERAS3_OWN_WRITES,
    "what the above reads with (the previous backup's paths swapped in for the call)", _K3W, params=("self",),
    uses=("_weights_path", "_training_metadata_path"))
KERAS3_BACKUP_END = PrivateApi(
    "keras.src.callbacks.backup_and_restore:BackupAndRestore.on_train_end", KERAS3_OWN_WRITES,
    "wrapped on a worker that is not the chief: the chief's backup is not deleted", _K3W, params=("self", "logs"),
    uses=("delete_checkpoint", "backup_dir"))

KERAS3_FEATURES = (KERAS3_MWMS, KERAS3_RESUME, KERAS3_OWN_WRITES)
KERAS3_APIS = (KERAS3_SYMBOLIC_BUILD, KERAS3_FIT, KERAS3_REDUCE_PER_REPLICA, KERAS3_MAKE_FUNCTION, KERAS3_MULTI_WORKER,
               KERAS3_TREE, KERAS3_EPOCH_STEPS, KERAS3_EPOCH_ITER, KERAS3_CHECKPOINT_SAVE, KERAS3_CHECKPOINT_PATH,
               KERAS3_BACKUP_BEGIN, KERAS3_BACKUP_LOAD, KERAS3_BACKUP_SAVE, KERAS3_BACKUP_END)

__all__ = sorted(name for name, value in list(globals().items()) if isinstance(value, (Feature, PrivateApi)))
__all__ += ["KERAS3_APIS", "KERAS3_FEATURES"]
