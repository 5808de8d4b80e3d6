"""Scaling report: the same job at several worker counts, per-replica batch fixed (so the global batch grows
with the workers, as the seed articles measured it), reported as examples/s, speedup and scaling efficiency.

`raytf.scaling(cfg, workers=[1, 2, 4])` or `python -m raytf.launch conf/local.yaml --scaling 1,2,4`. Each point is an
ordinary run (`<name>-w<N>`); the table and plot go to `<storage.path>/<name>/scaling.{csv,png}`.
"""

from __future__ import annotations

import copy
import datetime as _dt
import logging
import statistics
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from raytf.api.deprecation import renamed_keyword
from raytf.config import Config, Strategy, load_config, script_mode
from raytf.errors import ConfigError, PlacementError, RaytfError

if TYPE_CHECKING:
    import pandas as pd

log = logging.getLogger("raytf")

COLUMNS = ["workers", "replicas", "global_batch", "examples_per_s", "step_ms", "speedup", "efficiency", "wall_s",
           "first_step_s", "status", "run"]


def parse_workers(text: str) -> list[int]:
    """`--scaling 1,2,4` as [1, 2, 4]; a clear error otherwise. Pure."""
    try:
        counts = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        counts = []
    if not counts or any(n < 1 for n in counts):
        raise ConfigError(f"--scaling ({text!r}) must be worker counts separated by commas, e.g. 1,2,4")
    return sorted(set(counts))


def steady_steps_per_s(metrics: pd.DataFrame, rank: int = 0) -> float | None:
    """Median steps/s of one rank's step rows, without the first report (it includes tracing) and, when
    there are several epochs, without the first epoch (warm-up). Pure."""
    if metrics.empty or "steps_per_s" not in metrics:
        return None
    steps = metrics[(metrics["kind"] == "step") & (metrics["rank"] == rank)].dropna(subset=["steps_per_s"])
    steps = steps[steps["step"] > 1]
    later = steps[steps["epoch"] > 1]
    values = list((later if not later.empty else steps)["steps_per_s"])
    return statistics.median(values) if values else None


def with_speedup(rows: list[dict[str, Any]]) -> pd.DataFrame:
    """The table with speedup and efficiency relative to the smallest worker count that ran. Pure."""
    import pandas as pd  # here, not at import time: `import raytf` stays light

    table = pd.DataFrame(rows, columns=[c for c in COLUMNS if c not in ("speedup", "efficiency")])
    for col in ("examples_per_s", "step_ms", "wall_s", "first_step_s", "replicas", "global_batch"):
        table[col] = pd.to_numeric(table[col])
    # The baseline is the smallest count whose run succeeded: a run that failed part-way measured little.
    ok = table[table["status"].eq("succeeded")].dropna(subset=["examples_per_s"])
    table["speedup"] = float("nan")
    table["efficiency"] = float("nan")
    if not ok.empty:
        w0, e0 = ok["workers"].iloc[0], ok["examples_per_s"].iloc[0]
        table["speedup"] = table["examples_per_s"] / e0
        table["efficiency"] = table["speedup"] / (table["workers"] / w0)
    return table[COLUMNS]


@renamed_keyword("cfg", "config")
def scaling(config: Config | str | dict, overrides: list[str] | Mapping[str, Any] | None = None, *,
            workers: Sequence[int] = (1, 2, 4), train_fn: Any = None, eval_fn: Any = None,
            quiet: bool = False) -> pd.DataFrame:
    """Run the job once per worker count and return the scaling table (one row per count). Its first arguments
    are `raytf.fit`'s: `config`, `overrides`, `train_fn=` (`eval_fn=`), and `quiet` has its default.

    The per-replica `train.batch_size` stays fixed; a count the cluster cannot host is reported as
    "infeasible" and the others still run. Writes scaling.csv and scaling.png under
    `<storage.path>/<run.name or scaling-<time>>/` (path in `table.attrs["plot"]`).
    """
    if isinstance(overrides, Sequence) and not isinstance(overrides, str) and overrides \
            and all(isinstance(n, int) for n in overrides):
        raise TypeError(f"raytf.scaling(config, overrides=None, *, workers=...): the worker counts are keyword "
                        f"arguments: raytf.scaling(config, workers={list(overrides)})")
    from raytf._driver.pickling import functions as pack

    return measure(config, workers, overrides, quiet=quiet, functions=pack(train_fn, eval_fn))


def measure(cfg: Config | str | dict, workers: Sequence[int], overrides: list[str] | Mapping[str, Any] | None = None,
            *, quiet: bool = False, refill_at_end: bool = True, functions: Any = None) -> pd.DataFrame:
    """`scaling`; `refill_at_end` as for api.fit._fit (false for the CLI's --scaling); `functions`: train_fn=
    and eval_fn=, pickled."""
    from raytf import _storage as storage
    from raytf._driver import figures
    from raytf.api.fit import _fit

    if not isinstance(cfg, Config) or overrides or functions:
        cfg = load_config(cfg, overrides, program=functions.recorded() if functions else None)
    if script_mode(cfg):
        raise ConfigError("--scaling needs a training function (train.entrypoint): a script's batch size and "
                          "steps are its own, so raytf cannot hold the per-replica batch fixed")
    if cfg.cluster.strategy not in (Strategy.multi_worker_mirrored, Strategy.parameter_server):
        raise ConfigError(f"--scaling varies cluster.num_workers: cluster.strategy ({cfg.cluster.strategy.value}) "
                          "has one task; use multi_worker_mirrored or parameter_server")
    counts = sorted(set(int(n) for n in workers))
    if not counts or counts[0] < 1:
        raise ConfigError(f"scaling workers ({list(workers)}) must be counts of at least 1")
    if cfg.metrics.every_steps < 1:
        raise ConfigError(f"--scaling measures throughput from step metrics: metrics.every_steps "
                          f"({cfg.metrics.every_steps}) must be at least 1, e.g. metrics.every_steps=10")
    base = cfg.run.name or f"scaling-{_dt.datetime.now():%Y%m%d-%H%M%S}"
    ps = cfg.cluster.strategy is Strategy.parameter_server
    rows = []
    for n in counts:
        c = copy.deepcopy(cfg)
        c.cluster.num_workers, c.run.name, c.checkpoint.resume = n, f"{base}-w{n}", False
        row: dict[str, Any] = {"workers": n, "run": c.run.name, "status": "infeasible"}
        try:
            # (a failed count is a row of the table)
            result = _fit(c, quiet=quiet, raise_on_failure=False, refill_at_end=refill_at_end, functions=functions)
        except PlacementError as e:
            log.warning("scaling: %d workers cannot be placed: %s", n, e)
            rows.append(row)
            continue
        except ConfigError:
            raise  # the same for every count
        except RaytfError as e:  # storage trouble for one count: reported, and the others still run
            log.warning("scaling: %d workers: %s", n, e)
            rows.append({**row, "status": "failed"})
            continue
        s = result.summary
        replicas = int(s.get("num_replicas_in_sync") or n)
        per_step = c.train.batch_size * (1 if ps else replicas)  # a PS step is one batch on one worker
        rate = steady_steps_per_s(result.metrics, rank=0)
        row.update(status=result.status, replicas=replicas, global_batch=per_step, wall_s=s.get("duration_s"),
                   first_step_s=s.get("first_step_s"),
                   examples_per_s=rate * per_step if rate else None, step_ms=1000 / rate if rate else None)
        rows.append(row)
        if rate is None and result.status == "succeeded":
            log.warning("scaling: %d workers: too few step reports to measure a rate; run more steps or lower "
                        "metrics.every_steps (%d)", n, c.metrics.every_steps)
        log.info("scaling: %d workers: %s examples/s (%s)", n,
                 f"{row['examples_per_s']:.0f}" if row["examples_per_s"] else "?", result.status)
    table = with_speedup(rows)
    rd = storage.RunDir(cfg.storage, base)
    rd.makedirs()
    rd.write_text("scaling.csv", table.to_csv(index=False))
    rd.write_bytes("scaling.png", figures.fig_png(figures.scaling_figure(
        table, title=f"{base}: per-replica batch {cfg.train.batch_size}")))
    table.attrs["plot"] = rd.uri_of("scaling.png")
    table.attrs["csv"] = rd.uri_of("scaling.csv")
    return table
