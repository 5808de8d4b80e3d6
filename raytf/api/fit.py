"""`raytf.fit`: train as configured and return the Result. Light at import: Ray comes in on the first call."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from raytf.config import Config, load_config

if TYPE_CHECKING:
    from raytf._core.events import Event
    from raytf.api.result import Result


def fit(
    cfg: Config | str | dict,
    overrides: list[str] | dict | None = None,
    *,
    quiet: bool = False,
    on_event: Callable[[Event], None] | None = None,
    datasets: Mapping[str, Any] | None = None,
) -> Result:
    """Train as configured and return the Result (status, metrics DataFrame, checkpoints).

    Args:
        cfg: a Config, a YAML path or a dict (see `load_config`).
        overrides: `key=value` strings or a {dotted key: value} mapping applied on top.
        quiet: no progress bars (log lines only).
        on_event: called on the driver with every Event the tasks send (kind, role, rank, payload).
        datasets: Ray Data input, {name: ray.data.Dataset}: each MultiWorkerMirroredStrategy worker reads an equal
            share of every one, `ctx.dataset(name)` in the training function (`raytf.dataset(name)` in a script).
            Read and preprocessed by Ray Data with its own resources; a new share each epoch and each attempt.

    Returns:
        The Result; a failed run has status "failed" and `error` set (`result.raise_for_status()`).

    Raises:
        ConfigError: the configuration is invalid (nothing was started).
        PlacementError: the cluster cannot host the tasks (nothing is left reserved).
    """
    return launch(cfg, overrides, quiet=quiet, on_event=on_event, datasets=datasets)


def launch(cfg: Config | str | dict, overrides: list[str] | dict | None = None, *, quiet: bool = False,
           on_event: Callable[[Event], None] | None = None, datasets: Mapping[str, Any] | None = None,
           refill_at_end: bool = True) -> Result:
    """`fit`, and whether the run's end asks for standby processes for the session's next run (`refill_at_end`;
    false for a CLI command, whose session is its one run)."""
    from raytf._driver import driver  # imports Ray: keep `import raytf` light
    from raytf.api.result import Result

    if not isinstance(cfg, Config) or overrides:
        cfg = load_config(cfg, overrides)
    outcome = driver.run(cfg, quiet=quiet, on_event=on_event, datasets=datasets, refill_at_end=refill_at_end)
    return Result(**vars(outcome), storage=outcome.config.storage)  # the caller's own storage options


def release_standbys() -> int:
    """End the session's standby task processes now (cluster.standby: processes with TensorFlow imported, kept
    for a retry's or the next run's tasks); returns how many there were. They also end with the session (the
    process that ran `raytf.fit`), and raytf makes new ones when a run wants them."""
    from raytf._driver import standby

    return standby.release()
