"""Ray Data input on the driver: the run's datasets (raytf.fit's `datasets=` or the train.datasets function), checked
before anything starts, and split per attempt into each task's iterators (_core/data.py says who reads what).

Imports Ray (ray.data only when a run has datasets), never TensorFlow.
"""

from __future__ import annotations

import copy
import importlib
import inspect
import logging
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import ray

from raytf._core import data as rules
from raytf._core import private_apis as apis
from raytf._core.plan import Plan, TaskSpec
from raytf._core.tasks import TaskInfo
from raytf._driver.placement import FIRST_LINE_S, QUEUE_LINE_S
from raytf.config import Config, Strategy
from raytf.config.rules import PS_DATASETS
from raytf.errors import ConfigError

log = logging.getLogger("raytf")


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0]}" if text else type(e).__name__


def from_factory(cfg: Config, paths: list[str]) -> Mapping[str, Any]:
    """Call train.datasets ("package.module:function") on the driver: with the run's Config when it takes an
    argument, else with none. Every way it can fail is one ConfigError line."""
    key = f"train.datasets ({cfg.train.datasets!r})"
    module_name, _, fn_name = cfg.train.datasets.partition(":")
    saved = list(sys.path)
    sys.path[:0] = [p for p in paths if p not in sys.path]
    try:  # (the path stays while the function runs: its own imports may need it)
        try:
            module = importlib.import_module(module_name)
        except Exception as e:
            raise ConfigError(f"{key}: module {module_name!r} could not be imported on the driver "
                              f"({_first_line(e)}). Fix: run from the directory that holds it, or add it with "
                              "train.python_path=[...]") from None
        fn = getattr(module, fn_name, None)
        if not callable(fn):
            raise ConfigError(f"{key}: module {module_name!r} has no function {fn_name!r}")
        try:
            takes_config = bool(inspect.signature(fn).parameters)
        except (TypeError, ValueError):
            takes_config = True
        try:
            out = fn(cfg) if takes_config else fn()
        except Exception as e:
            raise ConfigError(f"{key} raised {_first_line(e)}. Fix: the function must return "
                              "{name: ray.data.Dataset}; run it alone to see the whole traceback") from None
    finally:
        sys.path[:] = saved
    if not isinstance(out, Mapping):
        raise ConfigError(f"{key} returned {type(out).__name__}, not a mapping. Fix: return "
                          "{name: ray.data.Dataset}, e.g. {'train': ray.data.read_parquet(...)}")
    return out


class Datasets:
    """The run's datasets, checked; `split` gives each attempt's tasks their iterators, `release` ends them."""

    def __init__(self, datasets: Mapping[str, Any], where: str) -> None:
        from ray.data import Dataset

        names = rules.check_names(datasets, where)
        for name in names:
            ds = datasets[name]
            if not isinstance(ds, Dataset):
                raise ConfigError(f"{where}: datasets[{name!r}] is a {type(ds).__module__}.{type(ds).__name__}, not "
                                  "a ray.data.Dataset. Fix: make it with Ray Data (ray.data.read_parquet, "
                                  "ray.data.from_items, ray.data.from_pandas, ...); a tf.data pipeline belongs in "
                                  "the training function")
        self.where = where
        self.datasets: dict[str, Any] = {name: datasets[name] for name in names}
        self._coordinators: list = []  # the split coordinators (Ray actors) of the attempt under way
        self._told: dict[str, int] = {}  # name -> the workers its unequal split was said for (raytf.compat)
        self._wait: _CpuWait | None = None  # the attempt's datasets that run Ray Data tasks, and since when

    @classmethod
    def of_run(cls, cfg: Config, given: Mapping[str, Any] | None, paths: list[str]) -> Datasets | None:
        """The run's datasets: `given` (raytf.fit's datasets=), or train.datasets' function; None without any."""
        if given is not None and cfg.train.datasets:
            raise ConfigError(f"datasets= and train.datasets ({cfg.train.datasets!r}) are both set: use one")
        if given is None and not cfg.train.datasets:
            return None
        if cfg.cluster.strategy is Strategy.parameter_server:
            raise ConfigError(PS_DATASETS)
        if given is not None:
            if not isinstance(given, Mapping):
                raise ConfigError(f"datasets= is a {type(given).__name__}: pass a mapping {{name: "
                                  "ray.data.Dataset}, e.g. datasets={'train': ds}")
            return cls(given, "datasets=") if given else None
        made = from_factory(cfg, paths)
        return cls(made, f"train.datasets ({cfg.train.datasets!r})") if made else None

    def check(self, cfg: Config, plan: Plan, *, embedded: bool) -> None:
        """Before anything is reserved: each dataset splits equally among the workers (when its row count is known
        without reading it). A Ray Train program (raytf.compat: train.ray_train) is told instead, once, and runs as
        under Ray Train, whose streaming_split(equal=True) drops the rows left over. On an embedded Ray (which
        never grows), a dataset that runs Ray Data tasks needs a CPU beside the tasks' (one whose blocks exist
        needs none); on a cluster, its wait is said while it waits (`waiting`)."""
        workers = sum(1 for t in plan.tasks if t.role == "worker")
        for name, ds in self.datasets.items():
            problem = rules.split_problem(name, self.known_rows(ds), workers)
            if problem is None:
                continue
            if not cfg.train.ray_train or not rules.droppable(self.known_rows(ds), workers):
                raise ConfigError(problem)
            log.warning("%s; going on, as Ray Train does", problem)
            self._told[name] = workers
        if cfg.train.steps_per_epoch is not None and not cfg.train.script and not cfg.train.module:
            # Keras fit keeps one iterator for all epochs when steps_per_epoch is set (tf-keras DataHandler): a
            # share's one pass then runs out after its rows, and fit stops early ("Your input ran out of data").
            log.warning("train.steps_per_epoch=%d with %s: an epoch of ctx.dataset(...) is the worker's whole share; "
                        "Keras fit given steps_per_epoch reads one pass for all epochs and stops when it runs out. "
                        "Fix: train.steps_per_epoch=null", cfg.train.steps_per_epoch, self.where)
        total = float(ray.cluster_resources().get("CPU", 0.0))
        reserved = sum(t.cpus for t in plan.tasks)
        tasking = [name for name, ds in self.datasets.items() if runs_tasks(ds)]
        if embedded and tasking and total - reserved < 1:  # (certain: nothing would ever free a CPU)
            raise ConfigError(rules.no_cpu_left(self.where, tasking, reserved, total))

    @staticmethod
    def known_rows(ds) -> int | None:
        """The dataset's row count when Ray Data knows it without reading (Parquet metadata, from_items), else None.
        Dataset._meta_count is Ray's own never-executing count (what Dataset.count tries first; a private API:
        raytf/_core/private_apis.py, DATA_ROWS)."""
        if not apis.available(apis.DATA_ROWS, log.warning):
            return None
        try:
            rows = ds._meta_count()
        except Exception as e:  # an internal API: no count, no check before training
            log.debug("datasets: row count unknown (%s)", e)
            return None
        return int(rows) if rows is not None else None

    def split(self, cfg: Config, tasks: list[TaskSpec], infos: list[TaskInfo]) -> dict[int, dict[str, Any]]:
        """rank -> {name: ray.data.DataIterator} for this attempt's tasks (a new split each attempt: a retry reads
        the current epoch from its start). Ray Data is told what the tasks reserve (Ray Train's data_config does
        the same), and where each share is read (locality_hints: its blocks are made on that node when it can)."""
        from ray.data import ExecutionResources

        self.release()
        n = sum(1 for t in tasks if t.role == "worker")
        reading = {t.rank: rules.reads(t.role, n) for t in tasks}
        workers = sorted((t for t in tasks if reading[t.rank] == rules.SHARE), key=lambda t: t.index)
        nodes = {i.rank: i.node_id for i in infos}
        hints = [nodes.get(t.rank) for t in workers]
        out: dict[int, dict[str, Any]] = {t.rank: {} for t in tasks if reading[t.rank] is not None}
        for name, ds in self.datasets.items():
            ds = _own_copy(ds)
            options = copy.deepcopy(ds.context.execution_options)
            _exclude(options, ExecutionResources(cpu=sum(t.cpus for t in tasks), gpu=sum(t.gpus for t in tasks)))
            ds.context.execution_options = options
            # Ray Data's progress bars and start lines come from its split coordinator, every epoch of every
            # dataset, to the driver's terminal through log_to_driver: raytf's own progress says how training goes.
            ds.context.enable_progress_bars = False
            ds.context.print_on_execution_start = False
            if len(workers) > 1:
                problem = rules.split_problem(name, self.known_rows(ds), len(workers))
                if problem is not None and self._told.get(name) != len(workers):
                    # Elastic training at a smaller size: said, not fatal (the full size was).
                    log.warning("%s (this attempt's %d workers)", problem, len(workers))
                    self._told[name] = len(workers)
                shares = ds.streaming_split(len(workers), equal=True,
                                            locality_hints=hints if all(hints) else None)
                for t, it in zip(workers, shares):
                    out[t.rank][name] = it
                coordinator = _coordinator(shares[0])
                if coordinator is not None:
                    self._coordinators.append(coordinator)
            for t in tasks:
                if reading[t.rank] == rules.WHOLE:
                    out[t.rank][name] = ds.iterator()
        tasking = [name for name, ds in self.datasets.items() if runs_tasks(ds)]
        self._wait = _CpuWait(tasking, sum(t.cpus for t in tasks), time.monotonic()) if tasking else None
        return out

    def waiting(self, training: bool) -> None:
        """Once per round of the attempt loop: while its tasks have not trained a step (`training`), a dataset that
        runs Ray Data tasks (reads, map_batches) on a cluster whose CPUs the tasks reserve all but less than one of
        waits for a CPU, maybe for ever (an autoscaler may add a node): said FIRST_LINE_S into the attempt, then
        every QUEUE_LINE_S, as a placement group's wait is."""
        wait = self._wait
        if wait is None or training:
            return
        now = time.monotonic()
        if now < wait.line_at:
            return
        total = float(ray.cluster_resources().get("CPU", 0.0))  # (again each time: an autoscaler may add nodes)
        if total - wait.reserved >= 1:
            wait.line_at = now + FIRST_LINE_S  # (asked again in a while, not every round)
            return
        wait.line_at = now + QUEUE_LINE_S
        log.warning("%s", rules.no_cpu_left(self.where, wait.names, wait.reserved, total, now - wait.since))

    def release(self) -> None:
        """End the split coordinators of the attempt that ended (Ray would, once no handle is left; the leak
        checks and a relaunch with the same actors' budget should not wait for that)."""
        for actor in self._coordinators:
            try:
                ray.kill(actor, no_restart=True)
            except Exception as e:
                log.debug("datasets: split coordinator: %s", e)
        self._coordinators = []
        self._wait = None


@dataclass
class _CpuWait:
    """An attempt's datasets that run Ray Data tasks: their names, the CPUs the tasks reserve, when it began, when
    its next line is due."""

    names: list[str]
    reserved: float
    since: float
    line_at: float = field(init=False)

    def __post_init__(self) -> None:
        self.line_at = self.since + FIRST_LINE_S


def runs_tasks(ds) -> bool:
    """Whether reading `ds` runs Ray Data tasks (which need a CPU each): anything but blocks that exist already
    (from_items, from_pandas, ..., a materialized dataset) and a limit of them. Its logical plan's operators (a
    private API: raytf/_core/private_apis.py, DATA_PLAN); True when unknown."""
    if not apis.available(apis.DATA_PLAN, log.warning):
        return True
    from ray.data._internal.logical.operators.from_operators import AbstractFrom
    from ray.data._internal.logical.operators.input_data_operator import InputData

    try:
        todo = [ds._logical_plan.dag]
        while todo:
            op = todo.pop()
            if not isinstance(op, AbstractFrom | InputData) and type(op).__name__ != "Limit":
                return True
            todo.extend(op.input_dependencies)
        return False
    except Exception as e:  # (changed: said while waiting, as for any dataset)
        apis.SWITCHES.turn_off(apis.LOGICAL_PLAN, f"changed: {type(e).__name__}: {e}", log.warning)
        return True


# Ray Data's private API (raytf/_core/private_apis.py: DATA_COPY, DATA_EXCLUDE, DATA_COORDINATORS); without one, the
# public way or nothing, one warning each.

def _own_copy(ds):
    """A deep copy: its DataContext is its own, the caller's dataset keeps its options (a notebook's next ds.take()
    has its progress bars, and no trainers' CPUs excluded). Without Dataset.copy's _deep_copy: the dataset itself."""
    if not apis.available(apis.DATA_COPY, log.warning):
        return ds
    return ds.copy(ds, _deep_copy=True)


def _exclude(options, resources) -> None:
    """The tasks' CPUs and GPUs are held by their placement group: Ray Data would otherwise count them as its own
    and plan tasks that cannot start. `_set_exclude_resources`: what Ray Train v1 sets, without the deprecation
    warning of the public setter (Ray 2.60); without it, the public setter (and its warning)."""
    if apis.available(apis.DATA_EXCLUDE, log.warning):
        options._set_exclude_resources(resources)
        return
    try:
        options.exclude_resources = resources
    except Exception as e:  # (Ray 2.60's setter calls the private one: then Ray Data plans with the CPUs it sees)
        log.debug("datasets: exclude_resources: %s", e)


def _coordinator(share):
    """A split's coordinator actor (ended with its attempt), None when this Ray Data keeps it elsewhere."""
    if not apis.available(apis.DATA_COORDINATORS, log.warning):
        return None
    return getattr(share, "_coord_actor", None)
