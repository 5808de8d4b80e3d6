"""`raytf.fit`: train as configured and return the Result. Light at import: Ray comes in on the first call."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from raytf._core.attempt_record import FAILED
from raytf.api.deprecation import renamed_keyword
from raytf.config import Config, load_config

if TYPE_CHECKING:
    from raytf._core.events import Event
    from raytf._core.function import Functions
    from raytf._driver.preflight import Launch
    from raytf.api.result import Result


@renamed_keyword("cfg", "config")
def fit(
    config: Config | str | dict,
    overrides: list[str] | dict | None = None,
    *,
    train_fn: Callable[[Any], Any] | None = None,
    eval_fn: Callable[[Any], Any] | None = None,
    quiet: bool = False,
    on_event: Callable[[Event], None] | None = None,
    datasets: Mapping[str, Any] | None = None,
    raise_on_failure: bool = True,
) -> Result:
    """Train as configured and return the Result (status, metrics DataFrame, checkpoints). `raytf.plan`,
    `raytf.scaling` and `raytf.sweep` take the same first arguments: `config`, `overrides`, `train_fn=`.

    Args:
        config: a Config, a YAML path or a dict (see `load_config`).
        overrides: `key=value` strings or a {dotted key: value} mapping applied on top.
        quiet: no progress bars (log lines only).
        on_event: called on the driver with every Event the tasks send (kind, role, rank, payload).
        datasets: Ray Data input, {name: ray.data.Dataset}: each MultiWorkerMirroredStrategy worker reads an equal
            share of every one, `ctx.dataset(name)` in the training function (`raytf.dataset(name)` in a script).
            Read and preprocessed by Ray Data with its own resources; a new share each epoch and each attempt.
        train_fn: the training function itself, in place of train.entrypoint: one defined in a notebook cell or a
            script's `__main__` is sent to the tasks by value (Ray's cloudpickle), one of an importable module by
            reference (the tasks import it). config.yaml records `package.module:function`, or
            `<function train defined in __main__>` for one sent by value.
        eval_fn: the side-car evaluator's function, in place of train.eval_entrypoint (with
            cluster.evaluator.enabled=true in `cfg` as a path or dict, or in `overrides`: a loaded Config is
            validated already, and one enabling the evaluator needs its function then).
        raise_on_failure: raise TrainingFailedError when the run fails (the default); False returns the failed
            Result instead (status "failed", `error` set), as raytf did before.

    Returns:
        The Result of a run that succeeded (or, with raise_on_failure=False, failed: `result.raise_for_status()`).

    Raises:
        TrainingFailedError: the run failed (after the failure policy's retries); it carries the Result
            (`e.result`: metrics, checkpoints, run_dir) and where the root cause happened (`e.rank`, `e.role`,
            `e.host`, `e.remote_traceback`). Its run directory is written as for any run.
        KeyboardInterrupt: Ctrl-C, after every task saved at one agreed step (checkpoint.on_interrupt).
        ConfigError: the configuration is invalid (nothing was started).
        PlacementError: the cluster cannot host the tasks (nothing is left reserved).
    """
    from raytf._driver.pickling import functions  # imports Ray: keep `import raytf` light

    return _fit(config, overrides, quiet=quiet, on_event=on_event, datasets=datasets,
                functions=functions(train_fn, eval_fn), raise_on_failure=raise_on_failure)


def _fit(cfg: Config | str | dict, overrides: list[str] | dict | None = None, *, quiet: bool = False,
         on_event: Callable[[Event], None] | None = None, datasets: Mapping[str, Any] | None = None,
         functions: Functions | None = None, raise_on_failure: bool = True, refill_at_end: bool = True,
         launch: Launch | None = None) -> Result:
    """`fit` with its functions pickled already (a sweep's trials get them so); `refill_at_end`: whether the run's
    end asks for standby processes for the session's next run (false for a CLI command, whose session is its one
    run); `launch`: the run already prepared and connected (the CLI's, _driver/preflight.py), in place of `cfg`."""
    from raytf._driver import driver, preflight  # imports Ray: keep `import raytf` light
    from raytf.api.result import Result

    if launch is None:
        if not isinstance(cfg, Config) or overrides:
            cfg = load_config(cfg, overrides, program=functions.recorded() if functions else None)
        launch = preflight.prepare(cfg, functions)  # every check before Ray: a ConfigError starts nothing
    outcome = driver.run(launch, quiet=quiet, on_event=on_event, datasets=datasets, refill_at_end=refill_at_end)
    result = Result(**vars(outcome), storage=outcome.config.storage)  # the caller's own storage options
    return raise_failed(result) if raise_on_failure else result


def raise_failed(result: Result) -> Result:
    """`result` when its run did not fail; else raise its TrainingFailedError (`result.error`), carrying the Result."""
    error = result.error
    if error is None or result.status != FAILED:
        return result
    error.result = result
    raise error


def release_standbys() -> int:
    """End the session's standby task processes now (cluster.standby: processes with TensorFlow imported, kept
    for a retry's or the next run's tasks); returns how many there were. They also end with the session (the
    process that ran `raytf.fit`), and raytf makes new ones when a run wants them."""
    from raytf._driver import standby

    return standby.release()
