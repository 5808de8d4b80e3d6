"""The tf.data service on Ray, the driver's side: each attempt's dispatcher and workers (TF's servers, each a task of
its own, _task/dataserver.py) in a task group and placement group of their own, started before the trainers and
stopped with them; servers that die are started again at their address (TaskGroup.replace) while training goes on
(_core/dataservice.py says why there, and when not); one that cannot be is the attempt loop's input, as a lost task.

Imports Ray, never TensorFlow.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

import ray
from ray.exceptions import RayError
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from raytf._core import brief, failure, tf_ports
from raytf._core import dataservice as rules
from raytf._core import events as ev
from raytf._core.dataservice import DISPATCHER, ROLE, WORKER, Service
from raytf._core.plan import Plan, TaskSpec
from raytf._core.tasks import TaskRun
from raytf._driver import nodes, placement
from raytf._driver.group import Servers, TaskGroup
from raytf._storage import RunDir

# The task-side modules the driver imports: the servers' actor class, the journal sweep run on the dispatcher's node.
from raytf._task.dataserver import DataServiceServer
from raytf._task.dataservice import sweep_journals
from raytf.config import Config, task_view
from raytf.errors import PlacementError, WorkerError

log = logging.getLogger("raytf")

_RemoteServer = ray.remote(DataServiceServer)
_sweep = ray.remote(num_cpus=0)(sweep_journals)


@dataclass
class _Slot:
    """The dispatcher, or worker `index`: the call the driver watches on its actor (start_server() until TF's server
    runs, then serve(), which fails when the actor dies), and how often it was started again this attempt."""

    spec: TaskSpec
    ref: Any = None
    starting: bool = False
    since: float = 0.0
    restarts: int = 0
    address: Any = None  # a replaced server's pending address() call

    @property
    def kind(self) -> str:
        return DISPATCHER if self.spec.role == rules.DISPATCHER_ROLE else WORKER

    @property
    def name(self) -> str:
        return rules.server_name(self.spec.role, self.spec.index)


class DataService:
    """The run's tf.data service (data_service.workers > 0): `start` and `wait_ready` per attempt, `poll` while it
    trains, `stop` after it (always); `observe` the tasks' events; `summary` for result.json. Its servers are a
    TaskGroup of their own (raytf's own servers: _driver/group.py's Servers)."""

    def __init__(self, cfg: Config, run_dir: RunDir, *, embedded: bool) -> None:
        self.cfg, self.run_dir, self.embedded = cfg, run_dir, embedded
        self.group: TaskGroup | None = None
        self.slots: list[_Slot] = []
        self.attempt = 0
        self.service: Service | None = None
        self.used: set[int] = set()  # ranks that read through it this attempt
        self.trained = False  # this attempt made a step
        self.lost: list[dict[str, Any]] = []  # servers lost (all attempts)
        self.attempts: list[dict[str, Any]] = []  # per attempt: where the servers ran, who used them

    @staticmethod
    def check(cfg: Config, plan: Plan, *, embedded: bool) -> None:
        """Before anything is reserved, on an embedded Ray (which cannot grow): the service's workers fit, beside
        the run's tasks. A cluster that may grow is waited for (cluster.placement_timeout_s) when reserving."""
        if not embedded:
            return
        problem = rules.placement_problem(cfg, plan.bundles, nodes.totals(), plan.placement_strategy)
        if problem:
            raise PlacementError(problem, never=True)

    # -- an attempt's servers ----------------------------------------------------------------------------------------
    def start(self, attempt: int) -> None:
        """Reserve the servers' group, start them and learn their addresses (the dispatcher's is what the workers
        register with and the trainers read from), then start TF's servers. Returns without waiting for TF
        (wait_ready). Raises WorkerError."""
        cfg, d = self.cfg, self.cfg.data_service
        self.attempt, self.used, self.trained, self.service = attempt, set(), False, None
        reserved, plan, bundles = rules.plans(cfg)
        pg = placement.reserve(
            reserved, timeout_s=cfg.cluster.placement_timeout_s, name=f"raytf:{cfg.run.name}:data_service",
            can_grow=not self.embedded, fix=rules.fix(self.embedded),
            what=f"the tf.data service's placement group (data_service.workers={d.workers}, each "
                 f"{rules.fmt_bundle(reserved.bundles[0])})")
        self.group = TaskGroup(cfg, plan, self.run_dir, embedded=self.embedded, pg=pg,
                               servers=Servers(_RemoteServer, bundles, lambda c, t: rules.runtime_env(c, t.role)))
        self.slots = [_Slot(t) for t in plan.tasks]
        self.group.start()
        try:
            infos = self.group.addresses()
        except WorkerError as e:
            raise _ours(e) from None
        dispatcher = infos[0]
        self.service = Service(dispatcher=dispatcher.address, processing_mode=d.processing_mode.value,
                               workers=d.workers, run=cfg.run.name, attempt=attempt)
        for slot in self.slots:
            self._start(slot, self.group.actors[self.slots.index(slot)])

    def _start(self, slot: _Slot, actor) -> None:
        run = TaskRun(cfg=task_view(self.cfg), run_dir=self.run_dir, bus=self.group.bus, attempt=self.attempt,
                      data_service=self.service)
        slot.ref, slot.starting, slot.since = actor.start_server.remote(run), True, time.monotonic()

    def wait_ready(self) -> Service:
        """Every server up (TF's servers listening, the workers registered), within cluster.startup_timeout_s: the
        record the training tasks get. Raises WorkerError."""
        timeout = self.cfg.cluster.startup_timeout_s
        refs = [s.ref for s in self.slots]
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=timeout)
        for slot in self.slots:
            node = self.group.node_of(slot.spec.rank)
            if slot.ref not in ready:
                raise WorkerError(f"tf.data service: the {slot.name} did not start within cluster.startup_timeout_s="
                                  f"{timeout:g}s", role=ROLE, node_id=node, kind=failure.STARTUP)
            error = self._started(slot)
            if error is not None:
                raise WorkerError(f"tf.data service: the {slot.name} did not start: {error.message}", role=ROLE,
                                  node_id=node, kind=failure.CONFIG if error.kind == failure.CONFIG else
                                  failure.STARTUP)
        infos = {i.rank: i for i in self.group.infos}
        self.attempts.append({"attempt": self.attempt, "dispatcher": self.service.dispatcher,
                              "workers": [infos[s.spec.rank].address for s in self.slots[1:]], "used_by": []})
        log.info("tf.data service of %s (%s): dispatcher %s, workers %s", self.cfg.run.name,
                 self.service.processing_mode, self.service.dispatcher, ", ".join(self.attempts[-1]["workers"]))
        exposed = [i.address for i in self.group.infos if not tf_ports.is_loopback(i.host)]
        if exposed and self.attempt == 1:
            log.warning("tf.data service: its servers accept anyone who can reach them (no authentication, no TLS): "
                        "%s; let only the cluster's hosts reach these ports (docs/security.md)", brief.few(exposed))
        return self.service

    def _started(self, slot: _Slot) -> WorkerError | None:
        """A start_server() call returned: None, and the slot now serves; or why it did not start (its kind
        failure.CONFIG: no restart can help, its port was taken)."""
        error = self.group.outcome(slot.ref, slot.spec)
        actor = self.group.actors[self.slots.index(slot)]
        if error is None and slot.address is not None:  # a replaced server: its new process
            try:
                self.group.readdressed(ray.get(slot.address, timeout=self.cfg.cluster.startup_timeout_s))
            except RayError as e:
                error = WorkerError(_first_line(e), role=slot.spec.role, kind=failure.SYSTEM)
        slot.address = None
        if error is not None:
            return error
        slot.starting, slot.ref = False, actor.serve.remote(bus=self.group.bus)
        return None

    # -- while it trains ---------------------------------------------------------------------------------------------
    def poll(self) -> list[WorkerError]:
        """Once per round of the attempt loop: a server that died is started again at its address, in its bundle (the
        dispatcher from its journal); one that cannot be is the attempt's failure (returned: the attempt loop's
        input, as a lost task)."""
        if self.service is None:
            return []
        watched = {s.ref: s for s in self.slots if s.ref is not None}
        ready, _ = ray.wait(list(watched), num_returns=len(watched), timeout=0)
        for ref in ready:
            slot = watched[ref]
            if slot.starting:
                error = self._started(slot)
                if error is None:
                    log.info("tf.data service: %s is back (%s)", slot.name, self.group.info(slot.spec.rank).address)
                    continue
                if error.kind == failure.CONFIG:
                    return [_ours(error)]
                why = error.message
            else:
                why = "its actor died (its process or node was lost)"
            if (error := self._lost(slot, why)) is not None:
                return [error]
        timeout = self.cfg.cluster.startup_timeout_s
        late = f"not started again within cluster.startup_timeout_s={timeout:g}s"
        for slot in self.slots:
            if slot.starting and time.monotonic() - slot.since > timeout and (error := self._lost(slot, late)):
                return [error]
        return []

    def _lost(self, slot: _Slot, why: str) -> WorkerError | None:
        info = self.group.info(slot.spec.rank)
        node = info.node_id if info is not None else ""
        self.lost.append({"attempt": self.attempt, "server": slot.name, "host": info.host if info else None,
                          "time": time.time(), "cause": why})
        decision = rules.on_lost(slot.kind, slot.spec.index, slot.restarts, why, node_alive=nodes.is_alive(node))
        if isinstance(decision, rules.Fail):
            return WorkerError(decision.message, role=ROLE, node_id=node, kind=decision.kind)
        log.warning("%s", rules.lost_line(slot.kind, slot.spec.index, why, self.cfg.data_service.processing_mode))
        slot.restarts += 1
        actor = self.group.replace(slot.spec.rank)
        slot.address = actor.address.remote()  # (before start_server: the actor answers its calls in order)
        self._start(slot, actor)
        return None

    def nodes(self) -> dict[str, list[str]]:
        """Node -> the names of the servers on it (a drain notice of one of them moves the run off it)."""
        out: dict[str, list[str]] = {}
        for slot in self.slots:
            if node := self.group.node_of(slot.spec.rank):
                out.setdefault(node, []).append(slot.name)
        return out

    def observe(self, e: ev.Event) -> None:
        """Every event the tasks send (the driver's dispatch): who read through the service, and whether the attempt
        trained (a run that never did says nothing of the service's use)."""
        if e.attempt != self.attempt:
            return
        if e.kind == ev.DATA_SERVICE and e.rank not in self.used:
            self.used.add(e.rank)
            if self.attempts:
                self.attempts[-1]["used_by"] = sorted(self.used)
        elif e.kind in (ev.STEP, ev.EPOCH):
            self.trained = True

    def stop(self) -> None:
        """After every attempt (success, failure, Ctrl-C): the servers' group torn down (their processes killed,
        their placement group released, their scratch swept), the dispatcher's journal removed from its node."""
        if self.service is not None and self.trained and not self.used:
            log.warning("%s", rules.unused(self.cfg.data_service.workers))
        group, self.group, self.slots, self.service = self.group, None, [], None
        if group is None:
            return
        dispatcher = group.info(0)
        group.teardown()
        if dispatcher is not None and nodes.is_alive(dispatcher.node_id):  # bounded, and never a reason to fail (the
            # next attempt's sweep runs too)
            ref = _sweep.options(scheduling_strategy=NodeAffinitySchedulingStrategy(
                dispatcher.node_id, soft=False)).remote((dispatcher.pid,))
            ready, _ = ray.wait([ref], timeout=10)
            if ready:
                try:
                    ray.get(ref)
                except RayError as e:
                    log.debug("journal sweep: %s", e)

    def summary(self) -> dict[str, Any]:
        """result.json's `data_service`."""
        d = self.cfg.data_service
        return {"workers": d.workers, "cpus": d.cpus, "resources": dict(d.resources),
                "processing_mode": d.processing_mode.value, "attempts": self.attempts, "lost": self.lost}


def _ours(e: WorkerError) -> WorkerError:
    """A server's failure as the service's (role data_service): the line says whose."""
    message = e.message if e.message.startswith("tf.data service") else f"tf.data service: {e.message}"
    return WorkerError(message, role=ROLE, node_id=e.node_id, remote_traceback=e.remote_traceback, kind=e.kind,
                       error_type=e.error_type)


def _first_line(e: BaseException) -> str:
    lines = [line for line in str(e).strip().splitlines() if line.strip()]
    return lines[0] if lines else type(e).__name__
