"""Ray Data input, the pure rules: which tasks read which share, what cannot be split equally, and the messages.

Each MultiWorkerMirroredStrategy worker reads an equal share of every dataset (Ray Data's streaming_split(n,
equal=True)); the evaluator, and a single-task strategy's one task, read each dataset whole.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from raytf._core.failure import CONFIG
from raytf.errors import ConfigError

_NAME = re.compile(r"^[A-Za-z_][\w.-]*$")

class DatasetNotGiven(KeyError):
    """ctx.dataset(name) / raytf.dataset(name) for a name the run was not given: a configuration error (not
    retried: `failure_kind`, which the task reports it as)."""

    failure_kind = CONFIG

    def __str__(self) -> str:  # KeyError's own repr-quotes its message
        return str(self.args[0]) if self.args else ""


SHARE = "share"  # this task reads its equal share (streaming_split)
WHOLE = "whole"  # this task reads the whole dataset (Dataset.iterator())


def check_names(names: Iterable[object], where: str) -> list[str]:
    """The datasets' names, in order; each a non-empty string such as "train" (`where` names the source)."""
    out = []
    for name in names:
        if not isinstance(name, str) or not _NAME.match(name):
            raise ConfigError(f"{where}: dataset name {name!r} is not a name like 'train' or 'val'. Fix: key the "
                              "datasets by short names (letters, digits, _ . -)")
        out.append(name)
    return out


def reads(role: str, workers: int) -> str | None:
    """What a task of `role` reads: its SHARE (an MWMS worker of several), the WHOLE dataset (the evaluator, or
    the one task of a single-task strategy), or nothing (None: ParameterServerStrategy's servers)."""
    if role == "evaluator" or (role == "worker" and workers == 1):
        return WHOLE
    if role == "worker":
        return SHARE
    return None


def split_problem(name: str, rows: int | None, workers: int) -> str | None:
    """Why `rows` rows cannot be split into `workers` equal shares without losing rows (None: they can, or the
    count is not known before reading). Ray Data's equal split drops the remainder every epoch."""
    if rows == 0:
        return f"datasets[{name!r}] has no rows. Fix: check the dataset's source"
    extra = rows % workers if rows is not None else 0
    if not extra:  # (one worker: never)
        return None
    if rows < workers:
        return (f"datasets[{name!r}]: {rows} row(s) cannot be shared by {workers} workers (each must read as many "
                f"rows as the others). Fix: more rows, or fewer workers")
    return (f"datasets[{name!r}]: {rows} rows do not split equally among {workers} workers: Ray Data's "
            f"streaming_split(equal=True) would drop {extra} row(s) every epoch. Fix: a multiple of {workers} rows, "
            f"e.g. ds.limit({rows - extra})")


def droppable(rows: int | None, workers: int) -> bool:
    """Whether an unequal split can go on by dropping the rows left over (Ray Train's way): every worker still
    reads one row or more."""
    return rows is not None and rows >= workers


def no_cpu_left(where: str, names: Iterable[str], reserved: float, total: float,
                waited_s: float | None = None) -> str:
    """The line for datasets that run Ray Data tasks (reads, map_batches: a CPU each) when the tasks reserve all but
    less than one of the cluster's CPUs: refused on an embedded Ray (never freed), said while it waits on a cluster
    (an autoscaler may add a node; `waited_s` so far)."""
    which = ", ".join(repr(n) for n in names)
    state = "would wait for a CPU for ever" if waited_s is None else f"wait for a CPU ({waited_s:.0f}s so far)"
    return (f"{where}: Ray Data's reads and map_batches of {which} {state}: the tasks reserve {reserved:g} of the "
            f"cluster's {total:g} CPUs. Fix: cluster.worker.cpus=0.5 (TensorFlow's threads follow it), more CPUs "
            "(ray.num_cpus, or CPU-only nodes), fewer workers, or a dataset read beforehand (ds.materialize())")


def missing(name: str, given: Iterable[str]) -> str:
    """The line for a training function that asks for a dataset the run was not given."""
    have = sorted(given)
    names = ", ".join(repr(n) for n in have) if have else "none"
    return (f"ctx.dataset({name!r}): no dataset named {name!r} was given to this run (given: {names}). Fix: pass "
            f"datasets={{{name!r}: ...}} to raytf.fit, or return it from the train.datasets function")


def global_batch(batch_size: int, replicas: int) -> int:
    """What each element of a worker's tf.data.Dataset holds: tf.distribute (Keras `fit` and
    experimental_distribute_dataset) treats a dataset's batch as the global batch and splits every element into
    num_replicas_in_sync parts; with auto-sharding off each worker keeps all of its parts, its replicas taking one
    each per step. So `batch_size` per replica means batch_size * num_replicas_in_sync per element, and every row
    of the worker's share is read once an epoch."""
    if batch_size < 1 or replicas < 1:
        raise ValueError(f"batch_size ({batch_size}) and replicas ({replicas}) must be at least 1")
    return batch_size * replicas
