"""raytf: Ray-orchestrated multi-node TensorFlow training."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from raytf.config import Config, load_config
from raytf.errors import (
    ConfigError,
    PlacementError,
    RaytfError,
    StorageError,
    TrainingFailedError,
    WorkerError,
)
from raytf.events import Event
from raytf.reporting import report
from raytf.scaling import scaling
from raytf.sweep import sweep

if TYPE_CHECKING:
    from raytf.context import TrainContext
    from raytf.plots import plot
    from raytf.result import Result, load_result

# Imported on first use: they pull in pyarrow, pandas and matplotlib, which a script run by raytf (that
# only calls raytf.report) and the CLI's start-up do not need. (sweep and scaling are imported above: a
# submodule's import would otherwise shadow the function of the same name; their modules stay light.)
_LAZY = {"TrainContext": "raytf.context", "plot": "raytf.plots", "Result": "raytf.result",
         "load_result": "raytf.result"}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'raytf' has no attribute {name!r}")


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
    "fit",
    "load_config",
    "load_result",
    "plot",
    "report",
    "scaling",
    "sweep",
]

__version__ = "0.1.0"


def fit(
    cfg: Config | str | dict,
    overrides: list[str] | dict | None = None,
    *,
    quiet: bool = False,
    on_event: Callable[[Event], None] | None = None,
) -> Result:
    """Train as configured and return the Result (status, metrics DataFrame, checkpoints).

    Args:
        cfg: a Config, a YAML path or a dict (see `load_config`).
        overrides: `key=value` strings or a {dotted key: value} mapping applied on top.
        quiet: no progress bars (log lines only).
        on_event: called on the driver with every Event the tasks send (kind, role, rank, payload).

    Returns:
        The Result; a failed run has status "failed" and `error` set (`result.raise_for_status()`).

    Raises:
        ConfigError: the configuration is invalid (nothing was started).
        PlacementError: the cluster cannot host the tasks (nothing is left reserved).
    """
    from raytf import driver  # imports Ray: keep `import raytf` light

    if not isinstance(cfg, Config) or overrides:
        cfg = load_config(cfg, overrides)
    return driver.fit(cfg, quiet=quiet, on_event=on_event)
