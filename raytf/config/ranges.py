"""Every numeric key of the schema and its allowed values (finite, at least...), checked by config/rules.py's
`validate`; load.py names them when OmegaConf cannot read a value as a number. Pure: raises ConfigError."""

from __future__ import annotations

import math
from typing import Any, NamedTuple

from raytf.config.schema import Config
from raytf.errors import ConfigError


class Range(NamedTuple):
    """A numeric key's allowed values: at least `low` (above it when `above`; None: any), finite, and null only
    when `null`. `text` is how errors say it, after "must be"."""

    low: float | None
    text: str
    above: bool = False
    null: bool = False


_SECONDS = "above 0 (seconds)"
# Every numeric key of the schema and its allowed values. validate checks them all (a role's resources even when
# the role is not used); load.py names them when OmegaConf cannot read a value as a number (`train.epochs=nan`).
RANGES: dict[str, Range] = {
    "ray.num_cpus": Range(1, "at least 1, or null for all of this machine's CPUs", null=True),
    "cluster.num_workers": Range(1, "at least 1"),
    "cluster.min_workers": Range(1, "at least 1 and at most cluster.num_workers, or null (not elastic)", null=True),
    "cluster.elastic.wait_s": Range(0, "0 or more (seconds), e.g. 30"),
    "cluster.elastic.grow_check_s": Range(0, f"{_SECONDS}, e.g. 30", above=True),
    "cluster.elastic.max_resizes": Range(0, "0 or more, e.g. 10"),
    "cluster.num_ps": Range(0, "0, or at least 1 with cluster.strategy=parameter_server"),
    **{f"cluster.{role}.{key}": r for role in ("worker", "chief", "ps", "evaluator") for key, r in (
        ("cpus", Range(0, "0 or more, e.g. 1")),
        ("gpus", Range(0, "0 or more, e.g. 0 or 1")),
        ("memory_gb", Range(0, "above 0 (GB), or null for no memory reservation", above=True, null=True)))},
    "cluster.ps.min_shard_bytes": Range(1, "at least 1"),
    "cluster.ps.max_shards": Range(1, "at least 1, or null for cluster.num_ps", null=True),
    "cluster.evaluator.finish_timeout_s": Range(0, "0 or more (seconds), e.g. 300"),
    "cluster.placement_timeout_s": Range(0, f"{_SECONDS}, e.g. 60", above=True),
    "cluster.queue_timeout_s": Range(0, "0 (no queue), above 0 (seconds), or null (as long as it takes)", null=True),
    "cluster.startup_timeout_s": Range(0, f"{_SECONDS}, e.g. 120", above=True),
    "cluster.threads": Range(1, "at least 1, or null for the CPU share", null=True),
    "cluster.standby": Range(0, "0 or more (standby task processes per node), e.g. 2"),
    "train.epochs": Range(1, "at least 1"),
    "train.steps_per_epoch": Range(1, "at least 1, or null", null=True),
    "train.batch_size": Range(1, "at least 1 (it is per replica)"),
    "train.seed": Range(None, ""),
    "checkpoint.every_epochs": Range(0, "0 or more (0 turns epoch checkpoints off)"),
    "checkpoint.every_steps": Range(0, "0 or more (0 turns step checkpoints off)"),
    "checkpoint.keep_last": Range(0, "0 or more (0 keeps every checkpoint)"),
    "checkpoint.interrupt_timeout_s": Range(0, f"{_SECONDS}, e.g. 60", above=True),
    "metrics.every_steps": Range(0, "0 or more (0 reports per epoch only)"),
    "metrics.flush_interval_s": Range(0, "0 or more (seconds), e.g. 5"),
    "metrics.max_names": Range(1, "at least 1, e.g. 256"),
    "metrics.straggler_ratio": Range(1, "above 1, e.g. 1.3", above=True),
    "metrics.straggler_window": Range(2, "at least 2, e.g. 5"),
    "failure.max_failures": Range(-1, "-1 (no limit) or more"),
    "failure.max_preemptions": Range(-1, "-1 (no limit) or more"),
    "failure.hang_timeout_s": Range(0, f"{_SECONDS}, e.g. 300", above=True),
    "failure.heartbeat_s": Range(0, f"{_SECONDS}, e.g. 2", above=True),
    "failure.max_task_rss_gb": Range(0, "0 (never recycle), above 0 (GiB), or null (from the node's memory)",
                                     null=True),
    "failure.collective_timeout_s": Range(0, f"{_SECONDS}, or null for none", above=True, null=True),
    "storage.max_inflight_uploads": Range(1, "at least 1"),
    "storage.upload_retries": Range(0, "0 or more, e.g. 5"),
    "storage.upload_backoff_s": Range(0, "0 or more (seconds), e.g. 0.5"),
    "storage.unwritable_timeout_s": Range(0, "0 or more (seconds), e.g. 600"),
    "storage.min_upload_mib_s": Range(0, "above 0 (MiB/s), e.g. 1.0", above=True),
    "data_service.workers": Range(0, "0 (off) or more, e.g. 2"),
    "data_service.cpus": Range(0, "0 or more (with data_service.resources), e.g. 1"),
    "sweep.max_concurrent": Range(1, "at least 1"),
    "sweep.num_samples": Range(1, "at least 1 (0 would run no trial)"),
    "tracking.flush_timeout_s": Range(0, "0 or more (seconds), e.g. 30"),
}


def number_wanted(key: str, integer: bool, r: Range | None = None) -> str:
    """What to write for a numeric key given something that is not a number: "an integer at least 1"."""
    r = r or RANGES.get(key)
    kind = "an integer" if integer else "a finite number"
    return f"{kind} {r.text}" if r and r.text else kind


def check_range(value: Any, key: str, r: Range) -> None:
    if value is None and r.null:
        return
    ok = (isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
          and (r.low is None or (value > r.low if r.above else value >= r.low)))
    if not ok:
        integer = isinstance(value, int) and not isinstance(value, bool)
        raise ConfigError(f"{key} ({value}) must be {r.text if integer and r.text else number_wanted(key, integer, r)}")


def check_ranges(cfg: Config) -> None:
    for key, r in RANGES.items():
        value: Any = cfg
        for part in key.split("."):
            value = getattr(value, part)
        check_range(value, key, r)
