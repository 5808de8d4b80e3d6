"""Experiment sweeps: every trial a full raytf run (its own placement group), scheduled by Ray Tune."""

from __future__ import annotations

import copy
import dataclasses
import logging
import numbers
import os
import shutil
import sys
import tempfile
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from raytf.api.deprecation import renamed_keyword
from raytf.api.deprecation import warn as deprecated
from raytf.config import Config, SweepConfig, load_config, to_dict, validate_run
from raytf.config.rules import check_space
from raytf.errors import ConfigError

if TYPE_CHECKING:
    import pandas as pd

log = logging.getLogger("raytf")

# Trials queue for their placement groups (all or nothing, so they cannot deadlock); give them time to.
QUEUED_PLACEMENT_TIMEOUT_S = 3600.0


def _is_domain(value: Any) -> bool:
    # A Tune domain (tune.uniform(...)) exists only once its module is imported: no need to import Ray to ask.
    sample = sys.modules.get("ray.tune.search.sample")
    return sample is not None and isinstance(value, sample.Domain)


def param_space(space: Mapping[str, Any]) -> dict[str, Any]:
    """Dotted config keys -> Tune's param space: a list is a grid axis, a Tune domain is sampled."""
    check_space(space, "sweep space", _is_domain)
    from ray import tune

    out = {}
    for key, values in space.items():
        if _is_domain(values) or (isinstance(values, Mapping) and "grid_search" in values):
            out[key] = values
        else:
            out[key] = tune.grid_search(list(values))
    return out


def trial_count(space: Mapping[str, Any], num_samples: int = 1) -> int | None:
    """How many trials a sweep runs: the grid's points times num_samples; None when an axis is sampled (a Tune
    domain: num_samples draws of it, times the grid)."""
    points = 1
    for values in space.values():
        if _is_domain(values):
            return None
        points *= len(values["grid_search"]) if isinstance(values, Mapping) else len(values)
    return points * num_samples


def check_sweep(cfg: Config, space: Mapping[str, Any], *, max_concurrent: int = 1, num_samples: int = 1) -> None:
    """What would run no trial or fail every one, refused before Ray starts: `max_concurrent` or `num_samples`
    below 1, an empty space or axis, a misspelt key. Pure (no Ray); raises ConfigError.

    A bad *value* fails only its own trial, which is then reported in the table with its error."""
    for name, value, why in (("max_concurrent", max_concurrent, ""), ("num_samples", num_samples,
                                                                      " (0 would run no trial)")):
        if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
            raise ConfigError(f"{name} ({value!r}) must be an integer at least 1{why}")
    check_space(space, "sweep space", _is_domain)
    base = to_dict(dataclasses.replace(cfg, sweep=SweepConfig()))
    for key in space:
        try:
            load_config(base, {key: None})
        except ConfigError as e:
            if "not in" in str(e):
                raise ConfigError(f"sweep space key {key!r}: {e}") from None


def _trial(config: dict[str, Any], *, base: dict[str, Any], sweep_name: str,
           datasets: Mapping[str, Any] | None = None, functions=None) -> None:
    """One Tune trial: a raytf run of the base config with this trial's values; epoch metrics of rank 0 are
    reported to Tune as they come (so schedulers such as ASHA can stop a trial early). `functions`: the sweep's
    train_fn/eval_fn, pickled once on the sweep's driver (a trial's process never unpickles them)."""
    from ray import tune

    from raytf._core import events
    from raytf.api.fit import _fit

    trial_id = tune.get_context().get_trial_id()
    overrides = {**config, "run.name": f"{sweep_name}-{trial_id}"}
    cfg = load_config(base, overrides)

    def report(e: events.Event) -> None:
        if e.kind == events.EPOCH and e.rank == 0:
            tune.report({**e.payload.metrics, "epoch": e.payload.epoch, "step": e.payload.step})

    # A failed trial is a row of the table (status, error), not an exception: the sweep goes on.
    result = _fit(cfg, quiet=True, on_event=report, datasets=datasets, functions=functions, raise_on_failure=False)
    final = {k: v for k, v in result.final_metrics.items() if isinstance(v, (int, float))}
    tune.report({**final, "raytf_status": result.status, "run_dir": result.run_dir,
                 "error": str(result.error) if result.error else None, "done": True})


def grid_given_as_overrides(overrides: Any) -> tuple[Mapping[str, Any], None]:
    """0.1's call, `raytf.sweep(config, {"train.epochs": [1, 2]})` (the grid second, before `space=` existed): the
    grid taken as `space` with a DeprecationWarning naming the new form, until 0.3 (CHANGELOG.md's policy). Any
    other call without `space` raises TypeError in one line naming it; so does a mapping that sets a key whose
    value is itself a list (train.args: its list is an override, not an axis)."""
    def swept(value: Any) -> bool:  # a grid's list, tune.grid_search's {"grid_search": [...]}, or a Tune domain
        return (isinstance(value, list | tuple) or (isinstance(value, Mapping) and "grid_search" in value)
                or _is_domain(value))

    needs = ("raytf.sweep() needs space=: the values to sweep, {dotted config key: a list of values or a Ray Tune "
             "domain}, e.g. raytf.sweep(config, space={\"train.epochs\": [1, 2]})")
    if isinstance(overrides, Mapping) and overrides and all(swept(v) for v in overrides.values()):
        listed = [k for k in overrides if _list_valued(str(k))]
        if listed:
            raise TypeError(f"{needs}; the second argument is the overrides ({', '.join(listed)} take a list)")
        deprecated("raytf.sweep(config, {grid}), the grid as the second argument", "pass it as space=: "
                   "raytf.sweep(config, space={...}) (the second argument is the overrides, as for raytf.fit)",
                   stacklevel=5)  # (warn, this, sweep, its keyword shim, the caller)
        return overrides, None
    raise TypeError(needs)


def _list_valued(key: str) -> bool:
    """Whether the config key takes a list as its value (its default is one: train.args, train.python_path)."""
    node: Any = Config()
    for part in key.split("."):
        if not dataclasses.is_dataclass(node) or not hasattr(node, part):
            return False
        node = getattr(node, part)
    return isinstance(node, list | tuple)


@renamed_keyword("cfg", "config")
def sweep(
    config: Config | str | Mapping[str, Any],
    overrides: list[str] | Mapping[str, Any] | None = None,
    *,
    space: Mapping[str, Any] | None = None,
    train_fn: Any = None,
    eval_fn: Any = None,
    max_concurrent: int = 1,
    num_samples: int = 1,
    metric: str | None = None,
    mode: str = "min",
    scheduler: Any = None,
    search_alg: Any = None,
    name: str | None = None,
    datasets: Mapping[str, Any] | None = None,
) -> pd.DataFrame:
    """Run one raytf training per point of `space` through Ray Tune and return one row per trial. Its first
    arguments are `raytf.fit`'s, `raytf.plan`'s and `raytf.scaling`'s: `config`, `overrides`, `train_fn=`.

    Args:
        config: the base configuration (a Config, a YAML path or a dict).
        overrides: `key=value` strings or a {dotted key: value} mapping applied on top, as for `raytf.fit`.
        space: dotted config keys to a list of values (a grid: `{"train.epochs": [1, 2],
            "cluster.num_workers": [1, 2]}` is 4 trials) or to a Ray Tune domain (`tune.uniform(...)`).
        max_concurrent: trials running at once; the rest queue (each reserves its own placement group).
        num_samples: repeats of the grid (random search: samples of the domains).
        metric: what schedulers and search algorithms optimise (e.g. "val_loss").
        mode: whether `metric` is minimised ("min") or maximised ("max").
        scheduler: any Ray Tune scheduler (e.g. ASHAScheduler).
        search_alg: any Ray Tune search algorithm.
        name: the sweep's name; trials' runs are `<storage.path>/<name>-<trial id>/`.
        datasets: Ray Data input for every trial, {name: ray.data.Dataset} (see `raytf.fit`); each trial reads
            them anew, its workers each an equal share.
        train_fn: the training function itself, for every trial (see `raytf.fit`): one defined in a notebook cell
            works.
        eval_fn: the evaluator's function itself, as `train_fn`.

    Returns:
        A DataFrame, one row per trial: the swept values, status ("succeeded"/"failed"/"stopped"), error,
        final metrics (`final_<name>`), best epoch metrics (`best_<name>`), and run_dir; failed trials included.
    """
    from raytf._core.function import configured
    from raytf._driver.pickling import functions as pack

    if space is None:
        space, overrides = grid_given_as_overrides(overrides)
    functions = pack(train_fn, eval_fn)  # pickled once, here
    # A Config too: validated here, not once per trial. config.yaml of every trial records the functions.
    base_cfg = validate_run(configured(load_config(config, overrides, program=functions.recorded()), functions))
    check_sweep(base_cfg, space, max_concurrent=max_concurrent, num_samples=num_samples)
    tracked = bool(base_cfg.tracking.mlflow.uri.strip())
    if tracked:
        from raytf._driver import tracking

        tracking.check_installed(base_cfg.tracking.mlflow.uri.strip())  # (not once per trial)
    from ray import tune

    from raytf._driver.connect import ensure_ray

    base_cfg = copy.deepcopy(base_cfg)
    # Trials run in other processes (other working directories): pin what the driver's cwd means.
    if "://" not in base_cfg.storage.path:
        base_cfg.storage.path = os.path.abspath(base_cfg.storage.path)
    base_cfg.train.python_path = [*map(os.path.abspath, base_cfg.train.python_path), os.getcwd()]
    base_cfg.cluster.placement_timeout_s = max(base_cfg.cluster.placement_timeout_s, QUEUED_PLACEMENT_TIMEOUT_S)
    base_cfg.run.name = None
    base_cfg.sweep = type(base_cfg.sweep)()  # each trial is a plain run
    space_tune = param_space(space)
    import pandas as pd  # here, not at import time: `import raytf` stays light

    sweep_name = name or f"sweep-{pd.Timestamp.now():%Y%m%d-%H%M%S}"
    parent = None
    if tracked:  # one MLflow run for the sweep, each trial's run its child
        from raytf._core.tracking import absolute_sqlite

        mlflow_cfg = base_cfg.tracking.mlflow
        mlflow_cfg.uri = absolute_sqlite(mlflow_cfg.uri.strip(), os.getcwd())
        from raytf._driver.sweeptracking import SweepRun

        parent = SweepRun(base_cfg, sweep_name, space)
        mlflow_cfg.tags = {**mlflow_cfg.tags, **parent.trial_tags()}
    base = to_dict(base_cfg)
    ensure_ray(base_cfg)
    if datasets is not None or base_cfg.train.datasets:  # what they are, checked once before any trial starts
        from raytf._driver.data import Datasets

        Datasets.of_run(base_cfg, datasets, [])
    tune_dir = tempfile.mkdtemp(prefix="raytf-tune-")
    trainable = tune.with_parameters(_trial, base=base, sweep_name=sweep_name, datasets=datasets,
                                     functions=functions or None)
    tuner = tune.Tuner(
        # The trial is only its run's driver: no CPU (its tasks reserve their own bundles), a token of memory
        # because Tune wants every trial to reserve something.
        tune.with_resources(trainable, {"cpu": 0, "memory": 64 * 1024**2}),
        param_space=space_tune,
        # reuse_actors: the next trial's driver runs in the process the last one ended in (Ray's default is a new
        # process per trial: its start and raytf's imports were ~3.8 s of every gap between two trials here, of
        # 8.9 s; raytf issue 53). A trial's run keeps no state in its process between runs (a notebook's second
        # raytf.fit is the same case).
        tune_config=tune.TuneConfig(max_concurrent_trials=max_concurrent, num_samples=num_samples,
                                    metric=metric, mode=mode if metric else None, scheduler=scheduler,
                                    search_alg=search_alg, reuse_actors=True),
        run_config=tune.RunConfig(name=sweep_name, storage_path=tune_dir, verbose=0),
    )
    status, table = "failed", None
    try:
        grid = tuner.fit()
        table = pd.DataFrame([_row(r, list(space), metric, mode) for r in grid])
        status = "succeeded"
        return table
    except KeyboardInterrupt:
        status = "interrupted"
        raise
    finally:  # Tune's own records of the trials: every run's results are in its run directory
        shutil.rmtree(tune_dir, ignore_errors=True)
        if parent is not None:
            parent.finish(status, table)


def _row(r, keys: list[str], metric: str | None, mode: str) -> dict[str, Any]:
    last = dict(r.metrics or {})
    row: dict[str, Any] = {k: r.config.get(k) for k in keys}
    if r.error is not None:
        status, error = "failed", f"{type(r.error).__name__}: {r.error}"
    elif last.get("done"):
        status, error = last.get("raytf_status", "succeeded"), last.get("error")
    else:
        status, error = "stopped", None  # a scheduler ended it early
    row.update(status=status, error=error, run_dir=last.get("run_dir"))
    skip = {"done", "raytf_status", "run_dir", "error", "epoch", "step", "trial_id", "time_this_iter_s",
            "time_total_s", "timestamp", "training_iteration", "date", "hostname", "node_ip", "pid",
            "time_since_restore", "iterations_since_restore", "checkpoint_dir_name", "config"}
    for k, v in last.items():
        if k not in skip and isinstance(v, (int, float)) and not isinstance(v, bool):
            row[f"final_{k}"] = v
    history = r.metrics_dataframe
    if history is not None and not history.empty:
        import pandas as pd

        for k in history.columns:
            if k in skip or k.startswith("config") or not pd.api.types.is_numeric_dtype(history[k]):
                continue
            better_low = "loss" in k or (metric == k and mode == "min")
            row[f"best_{k}"] = history[k].min() if better_low else history[k].max()
        row["epochs"] = int(history["epoch"].max()) if "epoch" in history else None
    return row
