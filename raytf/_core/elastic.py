"""Elastic training's decisions (cluster.min_workers < cluster.num_workers), pure: which group sizes to try, the
batch each size trains with, the attempt's view of the config, and whether another resize is allowed.

A TF collective group cannot change its size in place (MultiWorkerMirroredStrategy's collectives and
ParameterServerStrategy's cluster are fixed when the strategy is built), so every resize is a restart of the
group from a checkpoint: shrinking from the latest committed one after a host is lost, growing from one saved at
an agreed step (function mode, MWMS) or from the next one committed (scripts, ParameterServerStrategy)."""

from __future__ import annotations

import copy
from dataclasses import dataclass

from raytf.config import Config, Strategy

# Attempt.resize: why an attempt's size differs from the one before.
SHRINK, GROW = "shrink", "grow"


def is_elastic(cfg: Config) -> bool:
    c = cfg.cluster
    return c.min_workers is not None and c.min_workers < c.num_workers


def min_workers(cfg: Config) -> int:
    c = cfg.cluster
    return c.num_workers if c.min_workers is None else c.min_workers


def per_replica_batch(cfg: Config, workers: int) -> int | None:
    """The per-replica batch a group of `workers` trains with: train.batch_size, or with keep_global_batch the
    full size's global batch split over `workers` (replicas per worker cancel out); None when it does not
    divide."""
    batch, full = cfg.train.batch_size, cfg.cluster.num_workers
    # ParameterServerStrategy's workers step asynchronously, each with its own batch: there is no global batch
    # across them to keep.
    ps = cfg.cluster.strategy is Strategy.parameter_server
    if not cfg.cluster.elastic.keep_global_batch or workers == full or ps:
        return batch
    total = batch * full
    return total // workers if total % workers == 0 else None


@dataclass(frozen=True)
class Sizes:
    """The sizes to try, largest first, and the ones skipped (keep_global_batch: the batch does not divide)."""

    tried: tuple[int, ...]
    skipped: tuple[int, ...]


def sizes(cfg: Config) -> Sizes:
    """From cluster.num_workers down to cluster.min_workers."""
    tried, skipped = [], []
    for n in range(cfg.cluster.num_workers, min_workers(cfg) - 1, -1):
        (tried if per_replica_batch(cfg, n) is not None else skipped).append(n)
    return Sizes(tuple(tried), tuple(skipped))


def sized(cfg: Config, workers: int) -> Config:
    """The config an attempt of `workers` workers runs with: cluster.num_workers and (keep_global_batch)
    train.batch_size for that size. The run's own config is left alone."""
    if workers == cfg.cluster.num_workers:
        return cfg
    out = copy.deepcopy(cfg)
    out.cluster.num_workers = workers
    batch = per_replica_batch(cfg, workers)
    if batch is None:
        raise ValueError(f"{workers} workers cannot keep the global batch of {cfg.train.batch_size} x "
                         f"{cfg.cluster.num_workers}")
    out.train.batch_size = batch
    return out


def grows_by_saving_now(cfg: Config, script: bool) -> bool:
    """Whether a grow saves at an agreed step (a training function under MWMS), or waits for the program's next
    committed checkpoint (scripts own their checkpoints; ParameterServerStrategy's chief saves on its own
    schedule)."""
    return not script and cfg.cluster.strategy is Strategy.multi_worker_mirrored


@dataclass(frozen=True)
class Try:
    """One size to place an attempt's group at, and how long to wait for it (`why`: what sets that wait)."""

    size: int
    timeout_s: float
    why: str


# Elastic training: how long each size between the full one and the smallest is given to be placed.
PROBE_S = 3.0


def tries(cfg: Config, size: int, may_resize: bool) -> tuple[Try, ...]:
    """The sizes to place the next group at, in order: without elastic training (or past
    cluster.elastic.max_resizes) the current `size` alone, up to cluster.placement_timeout_s; else the full size
    up to cluster.elastic.wait_s, each smaller one (down to cluster.min_workers) briefly, the smallest up to
    cluster.placement_timeout_s."""
    c = cfg.cluster
    if not is_elastic(cfg) or not may_resize:
        return (Try(size, c.placement_timeout_s, "cluster.placement_timeout_s"),)
    tried = sizes(cfg).tried
    return tuple(Try(n, c.placement_timeout_s, "cluster.placement_timeout_s") if i == len(tried) - 1
                 else Try(n, c.elastic.wait_s, "cluster.elastic.wait_s") if i == 0
                 else Try(n, PROBE_S, "elastic training's probe of a smaller size") for i, n in enumerate(tried))
