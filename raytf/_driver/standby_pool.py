"""The standby pool actor's own code (`raytf:standby-pool`, raytf/_driver/standby.py made it and says what it is
for): it runs in that actor's process, on the driver's node, and starts, hands out and ends a Ray job's standby
task processes, and the nodes' templates (raytf/_task/script/template.py)."""

from __future__ import annotations

import logging
import uuid
from typing import Any

import ray
from ray.exceptions import RayError
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from raytf._core import standbys
from raytf._core.plan import actor_env
from raytf._task.actor import TaskActor
from raytf._task.script.keeper import START_S as KEEPER_START_S
from raytf._task.script.keeper import Template, TemplateKeeper

log = logging.getLogger("raytf")

class StandbyPool:
    """The standbys of one Ray job, by (node, runtime_env key): those still importing TensorFlow and those ready."""

    def __init__(self) -> None:
        self._task = ray.remote(TaskActor)
        self._keeper = ray.remote(TemplateKeeper)
        self._warming: dict[tuple[str, str], list[tuple[Any, Any]]] = {}  # (node, key) -> [(actor, warm ref)]
        self._ready: dict[tuple[str, str], list[Any]] = {}
        self._pids: dict[int, int] = {}  # id(a ready standby's handle) -> its pid (warm()'s): waited for at release
        # (node, a runtime_env's key: standbys.template_key, one for a script's standbys and a function's) -> its
        # template's keeper
        self._templates: dict[tuple[str, str], Any] = {}
        self._imported: dict[tuple[str, str], Any] = {}  # the same -> the keeper's imported() call
        self._commands: dict[tuple[str, str], str] = {}  # the same -> the keeper's worker_command()

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
        self._harvest(where)
        have = len(self._ready.get(where, [])) + len(self._warming.get(where, []))
        started = 0
        option, env = actor_env(runtime_env)  # (as a task's: its variables set before warm() imports TensorFlow)
        template = self._template(node_id, key, runtime_env) if count > have else None
        if template is not None and not script:  # a function's standby: a process the template forks (its shim waits
            option = standbys.forked_option(option, self._commands.get(_at(node_id, key))) or option  # for its import)
        for _ in range(max(0, count - have)):
            actor = self._task.options(
                num_cpus=0, max_restarts=0, **({"runtime_env": option} if option else {}),
                scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False)).remote(None, None, env)
            self._warming.setdefault(where, []).append(
                (actor, actor.warm.remote(script=script, template=template if script else None)))
            started += 1
        return started

    def _template(self, node_id: str, key: str, runtime_env: dict[str, Any]) -> Any:
        """The keeper of the template for `key` on `node_id` (_task/script/template.py), made now if there is none:
        TensorFlow imported once per node (on idle CPU), a script's standbys fork their children from it and a
        function's standbys are processes it forks. Waits for the keeper's start (a second or so; a standby asked
        for is worth it), for its `worker_command`."""
        where = _at(node_id, key)
        if where not in self._templates:
            option, env = actor_env(runtime_env)
            keeper = self._keeper.options(
                num_cpus=0, max_restarts=0, max_concurrency=4, **({"runtime_env": option} if option else {}),
                scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False),
            ).remote(f"raytf-template-{uuid.uuid4().hex[:16]}", env)
            self._templates[where], self._imported[where] = keeper, keeper.imported.remote()
            try:
                self._commands[where] = ray.get(keeper.worker_command.remote(), timeout=KEEPER_START_S)
            except (RayError, TimeoutError) as e:  # (GetTimeoutError is both) its forks serve scripts only, then
                log.warning("the template on node %s did not start (%s): standbys import TensorFlow themselves",
                            node_id[:12], e)
        return self._templates[where]

    def template(self, node_id: str, key: str) -> Template | None:
        """The template for `key` on `node_id` once it has imported TensorFlow: a new script task's child forks from
        it at once, and a new function task's process is one it forks. None before (the task imports TensorFlow
        itself, rather than wait for a template's import on idle CPU), or without one (`fill` makes it)."""
        where = _at(node_id, key)
        ref = self._imported.get(where)
        if ref is None or not ray.wait([ref], timeout=0)[0]:
            return None
        try:
            ray.get(ref)
        except RayError as e:  # (the next fill makes another)
            log.warning("the template on node %s failed to start: %s", node_id[:12], e)
            ray.kill(self._templates.pop(where), no_restart=True)
            del self._imported[where]
            self._commands.pop(where, None)
            return None
        return Template(self._templates[where], self._commands.get(where))

    def take(self, node_id: str, key: str, count: int) -> list[Any]:
        """Up to `count` standbys of `key` on `node_id`, no longer the pool's (the caller kills them): the ready
        ones first, then those still importing TensorFlow (_core/standbys.py says why)."""
        where = (node_id, key)
        self._harvest(where)
        ready, warming = self._ready.get(where, []), self._warming.get(where, [])
        plan = standbys.take(count, len(ready), len(warming))
        taken, self._ready[where] = ready[:plan.ready], ready[plan.ready:]
        for a in taken:
            self._pids.pop(id(a), None)
        taken += [actor for actor, _ in warming[:plan.warming]]
        self._warming[where] = warming[plan.warming:]
        return taken

    def warming(self) -> list[Any]:
        """The warm-up calls of the standbys still importing TensorFlow: a caller may wait on them."""
        return [ref for pending in self._warming.values() for _, ref in pending]

    def counts(self) -> dict[str, dict[str, int]]:
        """{node: {"ready": n, "warming": n}} (every key): what the pool holds."""
        out: dict[str, dict[str, int]] = {}
        for where in {*self._ready, *self._warming}:
            self._harvest(where)
            c = out.setdefault(where[0], {"ready": 0, "warming": 0})
            c["ready"] += len(self._ready.get(where, []))
            c["warming"] += len(self._warming.get(where, []))
        return out

    def release(self) -> standbys.Released:
        """End every standby: how many, and on which nodes (their scratch directories, which ray.kill leaves, are
        the caller's to sweep: standby.release)."""
        actors = [a for v in self._ready.values() for a in v] + [a for v in self._warming.values() for a, _ in v]
        # (its template goes with it, and so do the script children it forked; the Ray workers it forked are Ray's:
        # a standby among them is killed here, a task goes with its run)
        keepers = list(self._templates.values())
        pids_on: dict[str, tuple[int, ...]] = {node: () for node, _ in [*self._ready, *self._warming]}
        for (node, _), ready in self._ready.items():  # (a warming one's pid is not known yet)
            pids_on[node] += tuple(self._pids[id(a)] for a in ready if id(a) in self._pids)
        for a in [*actors, *keepers]:
            try:
                ray.kill(a, no_restart=True)
            except RayError as e:
                log.debug("kill: %s", e)
        wait_gone([*actors, *keepers])
        self._ready, self._warming, self._pids, self._templates, self._imported = {}, {}, {}, {}, {}
        self._commands = {}
        return standbys.Released(len(actors), pids_on)


def _at(node_id: str, key: str) -> tuple[str, str]:
    """Where the template of standbys of `key` on `node_id` is kept (one for a script's and a function's)."""
    return node_id, standbys.template_key(key)


def wait_gone(actors: list, timeout_s: float = 10.0) -> None:
    """Until Ray knows the killed `actors` dead (a call to one fails), at most `timeout_s` in all: whoever looks
    next (a leak check, the next run) sees them gone."""
    refs = [a.__ray_ready__.remote() for a in actors]
    ray.wait(refs, num_returns=len(refs), timeout=timeout_s)
