"""The run directory on shared storage: the only package that reads or writes it (through pyarrow.fs), every
access through one retry rule (`RunDir.retried`). Split by concept: `rundir` (paths, plain files, the rule),
`checkpoints` (checkpoints and the exported model, each committed by a marker), `metrics` (the metrics table in
parts), `staged` (files this node writes while the run goes, uploaded once complete)."""

from raytf._storage.checkpoints import CheckpointStore
from raytf._storage.metrics import METRICS_FILE, METRICS_PARTS_DIR, METRICS_PARTS_KEY, MetricsStore
from raytf._storage.rundir import (
    CHECKPOINTS_DIR,
    CONFIG_FILE,
    MODEL_DIR,
    NODE_LOCAL_ROOT_ENV,
    RESULT_FILE,
    STORAGE_CHECK_PREFIX,
    WORKDIR_DIR,
    RunDir,
    resolve,
    task_log,
    task_log_dir,
    task_workdir,
    with_retries,
)
from raytf._storage.staged import Staged
from raytf.errors import StorageError

__all__ = [
    "CHECKPOINTS_DIR",
    "CONFIG_FILE",
    "METRICS_FILE",
    "METRICS_PARTS_DIR",
    "METRICS_PARTS_KEY",
    "MODEL_DIR",
    "NODE_LOCAL_ROOT_ENV",
    "RESULT_FILE",
    "STORAGE_CHECK_PREFIX",
    "WORKDIR_DIR",
    "CheckpointStore",
    "MetricsStore",
    "RunDir",
    "Staged",
    "StorageError",
    "resolve",
    "task_log",
    "task_log_dir",
    "task_workdir",
    "with_retries",
]
