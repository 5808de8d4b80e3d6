"""Standby task processes: Ray actors with TensorFlow and tf-keras already imported, kept per node, that take the
next attempt's or the next run's tasks (raytf issues 22 and 70: fast recovery and fast repeat runs).

A task process costs ~0.3-1.5 s to start (a worker Ray pre-started when the task needs no runtime_env of its own,
plan.actor_env; a new worker otherwise: benchmarks/actor_start.py) and ~3 s to import TensorFlow before it can build
its strategy. A standby has done both, in a process of its own that Ray started as it starts any worker (a fresh
interpreter: nothing forked, no state shared with any other process; raytf issue 70). It never builds a strategy (a
process can build a collective strategy only once) and never touches a GPU (tasks with GPUs always start afresh: Ray
gives a GPU's ids only to an actor that reserves it). A task a standby takes still has its placement-group bundle
reserved (the standby itself reserves nothing: `num_cpus=0`), so the cluster's accounting is the same as for a fresh
actor. A script's standby also holds the warm child its script will run in (script/spawn.py: spawned and exec'd,
TensorFlow imported there).

The pool is an object of the driver's own process (the session: a notebook's kernel, a CLI run, a sweep trial's
process), not an actor: every standby is made by that process and so owned by it (Ray ends an actor with its
owner). A task a run takes from the pool is then owned by the run's own driver session, as a fresh task's actor is,
and nothing else (`release()`, a standby's loss, any other process's end) can touch it: an actor made by another
actor (the pool actor this replaced) dies with that actor, and so did the running tasks taken from it. Each attempt,
once its first step is in, asks for what it took to be made again: at most `cluster.standby` per node and
runtime_env.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
from collections.abc import Callable
from typing import Any

import ray
from ray.exceptions import RayError
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from raytf._core import standbys
from raytf._core.plan import Plan, TaskSpec, actor_env, spare_nodes, task_runtime_env
from raytf._driver import nodes, placement

# The one task-side module the driver imports: Ray needs the actor's class (and the sweep's function).
from raytf._task.actor import TaskActor, sweep_after
from raytf.config import Config

log = logging.getLogger("raytf")

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
    return f"{key}-script" if script else key


class StandbyPool:
    """The standbys of one driver process, by (node, runtime_env key): those still importing TensorFlow and those
    ready. Its calls start actors and ask Ray how their warm-up goes; none waits for a standby. A run's driver loop,
    its refill and the caller's `release` may call it from different threads: one lock."""

    def __init__(self) -> None:
        self._task = ray.remote(TaskActor)
        self._lock = threading.Lock()
        self._warming: dict[tuple[str, str], list[tuple[Any, Any]]] = {}  # (node, key) -> [(actor, warm ref)]
        self._ready: dict[tuple[str, str], list[Any]] = {}
        self._pids: dict[int, int] = {}  # id(a ready standby's handle) -> its pid (warm()'s): waited for at release

    def _harvest(self, where: tuple[str, str]) -> None:
        pending = self._warming.get(where, [])
        if not pending:
            return
        refs = [ref for _, ref in pending]
        done, _ = ray.wait(refs, num_returns=len(refs), timeout=0)
        done = set(done)
        still = []
        for actor, ref in pending:
            if ref not in done:
                still.append((actor, ref))
                continue
            try:
                self._pids[id(actor)] = ray.get(ref)["pid"]
                self._ready.setdefault(where, []).append(actor)
            except RayError as e:  # a standby that could not import TensorFlow is no standby
                log.warning("a standby on node %s failed to start: %s", where[0][:12], e)
                ray.kill(actor, no_restart=True)
        self._warming[where] = still

    def fill(self, node_id: str, key: str, runtime_env: dict[str, Any], count: int, script: bool = False) -> int:
        """Start standbys on `node_id` until `count` are ready or warming there for `key` (for a script's tasks:
        `script`); how many it started."""
        where = (node_id, key)
        option, env = actor_env(runtime_env)  # (as a task's: its variables set before warm() imports TensorFlow)
        with self._lock:
            self._harvest(where)
            have = len(self._ready.get(where, [])) + len(self._warming.get(where, []))
            started = 0
            for _ in range(max(0, count - have)):
                actor = self._task.options(
                    num_cpus=0, max_restarts=0, **({"runtime_env": option} if option else {}),
                    scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False)).remote(None, None, env)
                self._warming.setdefault(where, []).append((actor, actor.warm.remote(script=script)))
                started += 1
        return started

    def take(self, node_id: str, key: str, count: int) -> list[Any]:
        """Up to `count` standbys of `key` on `node_id`, no longer the pool's (the caller kills them): the ready
        ones first, then those still importing TensorFlow (_core/standbys.py says why)."""
        where = (node_id, key)
        with self._lock:
            self._harvest(where)
            ready, warming = self._ready.get(where, []), self._warming.get(where, [])
            plan = standbys.take(count, len(ready), len(warming))
            taken, self._ready[where] = ready[:plan.ready], ready[plan.ready:]
            for a in taken:
                self._pids.pop(id(a), None)
            taken += [actor for actor, _ in warming[:plan.warming]]
            self._warming[where] = warming[plan.warming:]
        return taken

    def pids(self) -> list[int]:
        """The process ids of the ready standbys (benchmarks: what they hold in memory)."""
        with self._lock:
            return [self._pids[id(a)] for v in self._ready.values() for a in v if id(a) in self._pids]

    def warming(self) -> list[Any]:
        """The warm-up calls of the standbys still importing TensorFlow: a caller may wait on them."""
        with self._lock:
            return [ref for pending in self._warming.values() for _, ref in pending]

    def counts(self) -> dict[str, dict[str, int]]:
        """{node: {"ready": n, "warming": n}} (every key): what the pool holds."""
        out: dict[str, dict[str, int]] = {}
        with self._lock:
            for where in {*self._ready, *self._warming}:
                self._harvest(where)
                c = out.setdefault(where[0], {"ready": 0, "warming": 0})
                c["ready"] += len(self._ready.get(where, []))
                c["warming"] += len(self._warming.get(where, []))
        return out

    def release(self) -> standbys.Released:
        """End every standby the pool holds (never one a run has taken: those are no longer its): how many, and on
        which nodes (their scratch directories, which ray.kill leaves, are the caller's to sweep: standby.release)."""
        with self._lock:
            actors = [a for v in self._ready.values() for a in v] + [a for v in self._warming.values() for a, _ in v]
            pids_on: dict[str, tuple[int, ...]] = {node: () for node, _ in [*self._ready, *self._warming]}
            for (node, _), ready in self._ready.items():  # (a warming one's pid is not known yet)
                pids_on[node] += tuple(self._pids[id(a)] for a in ready if id(a) in self._pids)
            self._ready, self._warming, self._pids = {}, {}, {}
        for a in actors:
            try:
                ray.kill(a, no_restart=True)
            except RayError as e:
                log.debug("kill: %s", e)
        _wait_gone(actors)
        return standbys.Released(len(actors), pids_on)


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

    def take(self) -> dict[int, Any]:
        """Bundle index -> a standby that takes its task: none while the session has no pool."""
        p = pool(create=False) if self.slots else None
        if p is None:
            return {}
        out: dict[int, Any] = {}
        for where, bundles in self.slots.items():
            out.update(zip(bundles, p.take(where[0], where[1], len(bundles))))
        return out

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
                p.fill(node, key, task_runtime_env(self.cfg, task), min(self.cfg.cluster.standby, len(bundles)),
                       script=self._runs_script(task))
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
                    p.fill(spare, key, task_runtime_env(self.cfg, task), 1, script=self._runs_script(task))
        except Exception as e:  # (as refill: a faster next attempt is a bonus)
            log.warning("cluster.standby: no standby processes made off the drained node (%s)", e)


def _wait_gone(actors: list, timeout_s: float = 10.0) -> None:
    """Until Ray knows the killed `actors` dead (a call to one fails), at most `timeout_s` in all: whoever looks
    next (a leak check, the next run) sees them gone."""
    refs = [a.__ray_ready__.remote() for a in actors]
    ray.wait(refs, num_returns=len(refs), timeout=timeout_s)


# This process's pool: made at its first refill, ended by release() (and with the process: Ray ends the actors it
# owns). A pool of a Ray session that was shut down holds handles of nothing: pool() makes a new one for the next.
_pool: StandbyPool | None = None
_pool_of: str | None = None  # the Ray session (its GCS address) the pool's actors live in
_made_lock = threading.Lock()


def _session() -> str | None:
    return ray.get_runtime_context().gcs_address if ray.is_initialized() else None


def pool(create: bool = True) -> StandbyPool | None:
    """This process's standby pool (made when `create` and there is none in the current Ray session); None
    without one."""
    global _pool, _pool_of
    with _made_lock:
        if _pool is not None and _pool_of != _session():
            _pool = None  # (its Ray is gone, and its actors with it)
        if _pool is None and create:
            _pool, _pool_of = StandbyPool(), _session()
        return _pool


def wait_ready(count: int, timeout_s: float) -> bool:
    """Whether this process's pool holds `count` ready standbys within `timeout_s`, waiting on their warm-up calls
    (tests and benchmarks: a run asks for them in the background)."""
    import time

    deadline = time.monotonic() + timeout_s
    while True:
        p = pool(create=False)
        if p is not None and sum(c["ready"] for c in p.counts().values()) >= count:
            return True
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        refs = p.warming() if p is not None else []
        if refs:
            ray.wait(refs, num_returns=len(refs), timeout=left)
        else:  # none asked for yet (a run asks once it has trained a while): look again shortly
            time.sleep(min(0.2, left))


def release() -> int:
    """End this process's standby task processes now, and sweep their scratch; how many there were. Tasks a run
    has taken are the run's: untouched. raytf makes standbys again when a run wants them (cluster.standby)."""
    global _pool
    with _made_lock:
        p, _pool = _pool, None
    if p is None or not ray.is_initialized() or _pool_of != _session():
        return 0
    out = p.release()
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
