"""The run directory on shared storage: the only package that reads or writes it (through pyarrow.fs), every
access through one retry rule (`RunDir.retried`). Split by concept: `layout` (the names, and the storage marker a
task checks: no pyarrow), `rundir` (paths, plain files, the rule), `checkpoints` (checkpoints and the exported
model, each committed by a marker), `metrics` (the metrics table in parts), `staged` (files this node writes while
the run goes, uploaded once complete)."""

from typing import TYPE_CHECKING

from raytf._lazy import lazy_attributes
from raytf._storage.layout import (
    CHECKPOINTS_DIR,
    CONFIG_FILE,
    MODEL_DIR,
    NODE_LOCAL_ROOT_ENV,
    RESULT_FILE,
    STORAGE_CHECK_PREFIX,
    WORKDIR_DIR,
    StorageMarker,
    task_log,
    task_log_dir,
    task_workdir,
)
from raytf.errors import StorageError

if TYPE_CHECKING:
    from raytf._storage.checkpoints import CheckpointStore
    from raytf._storage.claim import Claim
    from raytf._storage.metrics import METRICS_FILE, METRICS_PARTS_DIR, METRICS_PARTS_KEY, MetricsStore
    from raytf._storage.retry import with_retries
    from raytf._storage.rundir import RunDir, resolve, strict_json
    from raytf._storage.staged import Staged

# What needs pyarrow, imported on first use: a task process unpickles a StorageMarker and names its log before it
# answers (group.addresses), and needs pyarrow only once it reads or writes storage (issue 38).
_LAZY = {"CheckpointStore": "checkpoints", "Claim": "claim", "METRICS_FILE": "metrics", "METRICS_PARTS_DIR": "metrics",
         "METRICS_PARTS_KEY": "metrics", "MetricsStore": "metrics", "RunDir": "rundir", "resolve": "rundir",
         "strict_json": "rundir", "with_retries": "retry", "Staged": "staged"}
__getattr__ = lazy_attributes("raytf._storage", {name: f"raytf._storage.{m}" for name, m in _LAZY.items()}, globals())


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
    "Claim",
    "MetricsStore",
    "RunDir",
    "Staged",
    "StorageError",
    "StorageMarker",
    "resolve",
    "strict_json",
    "task_log",
    "task_log_dir",
    "task_workdir",
    "with_retries",
]
