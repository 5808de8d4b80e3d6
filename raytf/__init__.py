"""raytf: Ray-orchestrated multi-node TensorFlow training.

Where code runs (docs/architecture.md): `config` and `_core` are pure (no Ray, no TensorFlow); `_driver` runs in
the driver's process (Ray, never TensorFlow); `_task` runs inside a task's actor (or a script's child process)
and is where TensorFlow is imported; `api` holds the user's faces; `launch` and `runs` are the CLIs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from raytf._core.events import Event
from raytf._lazy import lazy_attributes
from raytf._task.report import report
from raytf._version import __version__  # noqa: F401  (raytf.__version__: its one source)
from raytf.errors import (
    ConfigError,
    PlacementError,
    RaytfError,
    StorageError,
    TrainingFailedError,
    WorkerError,
)

if TYPE_CHECKING:
    from raytf._task.context import TrainContext
    from raytf._task.dataservice import data_service
    from raytf._task.script.data import dataset
    from raytf.api.fit import fit, release_standbys
    from raytf.api.plan import plan
    from raytf.api.plots import plot
    from raytf.api.result import Result, load_result
    from raytf.api.scaling import scaling
    from raytf.api.sweep import sweep
    from raytf.config import Config, load_config

# Imported on first use: they pull in pyarrow, pandas and matplotlib, which a script run by raytf (that
# only calls raytf.report) and the CLI's start-up do not need; and the driver's API (fit, its config loading and
# omegaconf, the plan's preview: ~0.1 s), which every task process would otherwise import with the package before
# it can answer: on one machine 128 tasks pay it on the same two cores (benchmarks.scale, issue 38).
_LAZY = {"TrainContext": "raytf._task.context", "plot": "raytf.api.plots", "Result": "raytf.api.result",
         "load_result": "raytf.api.result", "dataset": "raytf._task.script.data",
         "data_service": "raytf._task.dataservice", "fit": "raytf.api.fit", "release_standbys": "raytf.api.fit",
         "plan": "raytf.api.plan", "scaling": "raytf.api.scaling", "sweep": "raytf.api.sweep",
         "Config": "raytf.config", "load_config": "raytf.config"}


__getattr__ = lazy_attributes("raytf", _LAZY, globals())


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


__all__ = [
    "Config",
    "ConfigError",
    "Event",
    "PlacementError",
    "RaytfError",
    "Result",
    "StorageError",
    "TrainContext",
    "TrainingFailedError",
    "WorkerError",
    "data_service",
    "dataset",
    "fit",
    "load_config",
    "load_result",
    "plan",
    "plot",
    "release_standbys",
    "report",
    "scaling",
    "sweep",
]

