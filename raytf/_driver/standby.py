"""Standby task processes: Ray actors with TensorFlow and tf-keras already imported, kept per node, that take the
next attempt's or the next run's tasks (raytf issue 22: fast recovery and fast repeat runs).

A task process costs ~0.3-1.5 s to start (a worker Ray pre-started when the task needs no runtime_env of its own,
plan.actor_env; a new worker otherwise: benchmarks/actor_start.py) and ~3 s to import TensorFlow before it can build
its strategy. A standby has done both. It never builds a strategy (a process can build a collective strategy only
once) and never touches a GPU (tasks with GPUs always start afresh: Ray gives a GPU's ids only to an actor that
reserves it). A task a standby takes still has its placement-group bundle reserved (the standby itself reserves
nothing: `num_cpus=0`), so the cluster's accounting is the same as for a fresh actor.

The standbys belong to one pool actor per Ray job (`raytf:standby-pool`, its code in standby_pool.py), made by the
driver's process: Ray ends an actor with its owner, so the pool and its standbys go when the session that made them
does (a notebook's kernel, a CLI run), and `release()` ends them at once. The pool keeps each node's script template
too (_task/script/template.py): a script task's child is forked from it, TensorFlow imported once per node. A
sweep's trials, in processes of their own, use the driver's pool. Each attempt, once its first step is in, asks the
pool to refill what it took: at most `cluster.standby` per node and runtime_env.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import ray
from ray.exceptions import RayError

from raytf._core import standbys
from raytf._core.plan import Plan, TaskSpec, spare_nodes, task_runtime_env
from raytf._driver import nodes, placement
from raytf._driver.standby_pool import StandbyPool, wait_gone

# The one task-side module the driver imports: Ray needs the actor's class (and the sweep's function).
from raytf._task.actor import sweep_after
from raytf._task.script.keeper import Template
from raytf.config import Config

log = logging.getLogger("raytf")

POOL_NAME = "raytf:standby-pool"
# An attempt asks for standbys once it has trained this long: at its first step, so that a failure at any point
# after it restarts in processes that imported TensorFlow already (raytf issue 53: a SIGKILL just after the first
# checkpoint recovered in 7.4-8.1 s when they were asked for only after 20 s). Their import runs at the lowest CPU
# priority (_task/warm.py) beside the training; what it costs the training is measured in benchmarks/RESULTS.md
# (benchmarks.recovery). A run's end asks too (Driver's `refill_at_end`: not a CLI command's, whose session is its
# one run), for the session's next run. In a Ray that ends with the run, later (_core/standbys.refill_after_s).
REFILL_AFTER_S = 0.0


def env_key(runtime_env: dict[str, Any], script: bool = False) -> str:
    """Standbys serve tasks of the same runtime_env only (its env vars are set before TensorFlow's import), and a
    script's task only one made for a script (TensorFlow imported in the child process its script will run in)."""
    key = hashlib.sha256(json.dumps(runtime_env, sort_keys=True, default=str).encode()).hexdigest()[:16]
    return f"{key}{standbys.SCRIPT_KEY}" if script else key


@dataclass(frozen=True)
class Taken:
    """What a task group's start takes from the session's pool (Slots.take), by bundle index: `standbys`, a standby
    that takes its task; `templates`, for a task no standby takes, its node's template once that has imported
    TensorFlow (a script task's child forks from it, a function task's process is one it forks; a task never waits
    for a template's import).

    A group's start makes no template where the pool has none (a fill does): measured on 2 cores
    (benchmarks/RESULTS.md, issue 53), a template made as a session's first group starts, its keeper's and the
    pool's processes starting beside the tasks' own imports, delayed that run's first step by ~4 s; the tasks
    waiting for it instead, by ~2 s."""

    standbys: dict[int, Any]
    templates: dict[int, Template]


class Slots:
    """Where standbys could take one task group's tasks: (node, runtime_env key) -> the plan's indexes of the tasks
    (bundles) there, those without GPUs. `take` at the group's start, `refill` once it trains (and after its
    teardown), `refill_off` at a drain notice."""

    def __init__(self, cfg: Config, plan: Plan, slots: dict[tuple[str, str], list[int]],
                 runs_script: Callable[[TaskSpec], bool]) -> None:
        self.cfg, self.plan, self.slots, self._runs_script = cfg, plan, slots, runs_script

    @classmethod
    def of(cls, cfg: Config, plan: Plan, pg, runs_script: Callable[[TaskSpec], bool]) -> Slots:
        slots: dict[tuple[str, str], list[int]] = {}
        on = placement.bundle_nodes(pg)
        for i, t in enumerate(plan.tasks):  # (no node known: no standbys; the attempt goes on as without them)
            if on is not None and not t.gpus and on.get(i):
                slots.setdefault((on[i], env_key(task_runtime_env(cfg, t), runs_script(t))), []).append(i)
        return cls(cfg, plan, slots, runs_script)

    def take(self) -> Taken:
        """The standbys that take the group's tasks, and the templates its script tasks' children fork from where no
        standby takes them: none while the session has no pool. Both asked of the pool before either is awaited
        (one round trip at a group's start, not two)."""
        p = pool(create=False) if self.slots else None
        if p is None:
            return Taken({}, {})
        takes = {where: p.take.remote(where[0], where[1], len(bundles)) for where, bundles in self.slots.items()}
        keepers = {where: p.template.remote(*where) for where in self.slots}
        standbys_of: dict[int, Any] = {}
        for where, ref in takes.items():
            try:
                standbys_of.update(zip(self.slots[where], ray.get(ref, timeout=10)))
            except RayError as e:  # no standby, then: the task starts afresh
                log.debug("standby take: %s", e)
        templates_of: dict[int, Template] = {}
        for where, ref in keepers.items():
            try:
                template = ray.get(ref, timeout=10)
            except RayError as e:  # (as above: the task imports TensorFlow itself)
                log.debug("template: %s", e)
                continue
            if template is not None:
                templates_of.update((b, template) for b in self.slots[where] if b not in standbys_of)
        return Taken(standbys_of, templates_of)

    def refill(self) -> None:
        """Ask the pool (made now if the session has none) for standbys in place of the group's tasks (on the nodes
        it was placed on): at most cluster.standby per node. In the background: the pool starts them, they import
        TensorFlow."""
        if not self.slots:
            return
        try:
            p = pool()
            for (node, key), bundles in self.slots.items():
                task = self.plan.tasks[bundles[0]]  # (the slot's tasks share its key: runtime_env, script or not)
                p.fill.remote(node, key, task_runtime_env(self.cfg, task),
                              min(self.cfg.cluster.standby, len(bundles)), script=self._runs_script(task))
        except Exception as e:  # a faster next attempt is a bonus, never a reason to fail (or hide why) a run
            log.warning("cluster.standby: no standby processes made (%s)", e)

    def refill_off(self, node: str, draining: set[str]) -> None:
        """A drain notice for `node`: standbys for its tasks asked for on other nodes (alive, not draining, not the
        group's, able to hold a task's bundle), so that the next attempt, placed off `node`, may start them in
        processes that imported TensorFlow while the group saved (raytf issue 52). Ray chooses where the next
        attempt goes: a best guess, and never a reason to fail a run."""
        moving = {key: bundles for (n, key), bundles in self.slots.items() if n == node}
        if not moving:
            return
        try:
            have = nodes.resources()
            avoid = {n for n, _ in self.slots} | draining | {node}
            p = pool()
            for key, bundles in moving.items():
                task = self.plan.tasks[bundles[0]]
                for spare in spare_nodes([self.plan.tasks[b].bundle for b in bundles], have, avoid):
                    p.fill.remote(spare, key, task_runtime_env(self.cfg, task), 1, script=self._runs_script(task))
        except Exception as e:  # (as refill: a faster next attempt is a bonus)
            log.warning("cluster.standby: no standby processes made off the drained node (%s)", e)


_RemotePool = ray.remote(num_cpus=0)(StandbyPool)
# The handle of the pool this process made. Ray ends an actor that is not detached once no handle to it is left,
# named or not (seen here: made in a run's refill, it was gone when the run returned); this one lives as long as
# the process (the session) does, or until release().
_made: list = []


def pool(create: bool = True):
    """This job's pool actor (made, owned by this process, when `create` and there is none); None without one."""
    try:
        return ray.get_actor(POOL_NAME)
    except ValueError:
        if not create:
            return None
    handle = _RemotePool.options(name=POOL_NAME, get_if_exists=True, max_restarts=0).remote()
    _made[:] = [handle]
    return handle


def wait_ready(count: int, timeout_s: float) -> bool:
    """Whether the session's pool holds `count` ready standbys within `timeout_s`, waiting on their warm-up calls
    (tests and benchmarks: a run asks for them in the background)."""
    import time

    deadline = time.monotonic() + timeout_s
    while True:
        p = pool(create=False)
        if p is not None and sum(c["ready"] for c in ray.get(p.counts.remote()).values()) >= count:
            return True
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        refs = ray.get(p.warming.remote()) if p is not None else []
        if refs:
            ray.wait(refs, num_returns=len(refs), timeout=left)
        else:  # none asked for yet (a run asks once it has trained a while): look again shortly
            time.sleep(min(0.2, left))


def release() -> int:
    """End this job's standby task processes (and their pool) now, and sweep their scratch; how many there were.
    raytf makes them again when a run wants them (cluster.standby)."""
    if not ray.is_initialized():
        return 0
    p = pool(create=False)
    if p is None:
        return 0
    try:
        out = ray.get(p.release.remote(), timeout=30)
    except RayError as e:
        log.debug("standby release: %s", e)
        out = standbys.Released(0, {})
    ray.kill(p, no_restart=True)
    wait_gone([p])
    _made.clear()
    _sweep(out.pids_on)
    return out.count


# The nodes whose tasks shared this process's place (machine, namespaces, user: tasks.local_sweeps, found at a
# group's teardown), each with the scratch root they reported. A standby there, started by the same raylet as they
# were, keeps its scratch under the same root: its sweep runs in this process, as the teardown's does, and not as a
# Ray task, which would first need a worker started on the node (0.57 s of a CLI's exit, measured on 2 cores).
_local_roots: dict[str, str] = {}


def note_local(roots: dict[str, str]) -> None:
    """Node -> scratch root, for nodes whose tasks share this process's place (a group's teardown)."""
    _local_roots.update(roots)


def _sweep(pids_on: dict[str, tuple[int, ...]], timeout_s: float = 10.0) -> None:
    """The released standbys' scratch directories, once their processes are gone: in this process where it can
    (`note_local`), by a Ray task on each other node that is up; bounded, and never a reason to fail (the next task
    on a node sweeps too)."""
    here, there = standbys.sweeps(pids_on, _local_roots)
    alive = nodes.alive() if there else set()
    sweep_after(here, {n: pids for n, pids in there.items() if n in alive}, timeout_s)
