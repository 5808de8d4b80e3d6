"""The run directory's names (its files, a task's log and working directory) and the storage marker a task checks
before it answers. No pyarrow: a task process imports this before it says where it is, and pyarrow with numpy
(~0.15 s) would be paid there by every task, on one machine on the same cores (benchmarks.scale, issue 38)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # (pyarrow's: a task that checks a local marker never imports it)
    from raytf._storage.rundir import RunDir

CONFIG_FILE = "config.yaml"
RESULT_FILE = "result.json"
CHECKPOINTS_DIR = "checkpoints"
MODEL_DIR = "model"
WORKDIR_DIR = "workdir"


# A task's files in the run directory, named by role and task index (worker1, ps0: TF's names for it).
def task_log(role: str, index: int, attempt: int) -> str:
    """The task's captured stdout/stderr."""
    return f"logs/{role}{index}-attempt{attempt}.log"


def task_log_dir(role: str, index: int, attempt: int) -> str:
    """What the task's program wrote into its own log directory ($RAYTF_LOG_DIR, ctx.log_dir)."""
    return f"logs/{role}{index}-attempt{attempt}"


def task_workdir(role: str, index: int) -> str:
    """What the task's program wrote into its working directory (each attempt's over the last's)."""
    return f"{WORKDIR_DIR}/{role}{index}"


# Test seam: a one-machine test cluster cannot show a node whose local disk differs from the driver's. A raylet
# started with this variable set makes its tasks see local paths under that root instead, as such a node would.
NODE_LOCAL_ROOT_ENV = "RAYTF_TEST_NODE_LOCAL_ROOT"
STORAGE_CHECK_PREFIX = ".storage-check-"


def seen_here(local_path: str) -> str:
    """Where this node sees a local path of the driver's (the test seam's root before it, where set)."""
    return os.environ.get(NODE_LOCAL_ROOT_ENV, "") + local_path


@dataclass(frozen=True)
class StorageMarker:
    """The driver's marker file in the run directory (`RunDir.marker`), which every task must see: the run
    directory is shared. A local path (or a mount: NFS) is checked with `os` (`local_path`, the driver's view);
    an object store's through the run directory (`run_dir`, a RunDir: pyarrow, with the node's credentials)."""

    name: str
    local_path: str | None = None
    run_dir: RunDir | None = None

    def __post_init__(self) -> None:
        if (self.local_path is None) == (self.run_dir is None):
            raise ValueError("a StorageMarker is checked one way: a local_path or a run_dir, exactly one")

    def visible(self) -> bool:
        if self.local_path is not None:
            return os.path.exists(seen_here(self.local_path))
        return self.run_dir.can_see(self.name)
