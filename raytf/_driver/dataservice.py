"""The tf.data service on Ray, the driver's side: each attempt's dispatcher and workers (TF's servers, each in an
actor of its own, _task/dataservice.py) in a placement group of their own, started before the trainers and stopped
with them; servers that die are started again at their address while training goes on (_core/dataservice.py says
why there, and when not).

Imports Ray, never TensorFlow.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any

import ray
from ray.exceptions import RayActorError, RayError
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy, PlacementGroupSchedulingStrategy

from raytf._core import dataservice as rules
from raytf._core import events as ev
from raytf._core import failure, tf_ports
from raytf._core.dataservice import DISPATCHER, ROLE, WORKER, Service
from raytf._core.plan import Plan, TaskSpec
from raytf._driver import nodes, placement
from raytf._storage import RunDir

# The task-side module the driver imports for the servers' actor class (and the journal sweep run on their node).
from raytf._task.dataservice import DataServiceServer, sweep_journals
from raytf.config import Config
from raytf.errors import PlacementError, WorkerError

log = logging.getLogger("raytf")

_RemoteServer = ray.remote(DataServiceServer)
_sweep = ray.remote(num_cpus=0)(sweep_journals)


@dataclass
class _Slot:
    """The dispatcher, or worker `index`: its actor (the latest, after restarts) and the call the driver watches on
    it (start() until TF's server runs, then serve(), which fails when the actor dies)."""

    role: str
    index: int
    actor: Any = None
    ref: Any = None
    starting: bool = False
    since: float = 0.0
    restarts: int = 0
    info: dict[str, Any] = field(default_factory=dict)  # its address() (host, port, node_id, pid)
    journal: str | None = None  # the dispatcher's, on its node

    @property
    def name(self) -> str:
        return "dispatcher" if self.role == DISPATCHER else f"worker {self.index}"


class DataService:
    """The run's tf.data service (data_service.workers > 0): `start` and `wait_ready` per attempt, `poll` while it
    trains, `stop` after it (always); `observe` the tasks' events; `summary` for result.json."""

    def __init__(self, cfg: Config, run_dir: RunDir, *, embedded: bool) -> None:
        self.cfg, self.run_dir, self.embedded = cfg, run_dir, embedded
        # As the tasks' addresses: what others reach the node at (loopback on an embedded single-machine Ray).
        self.advertise = cfg.cluster.advertise_address or ("127.0.0.1" if embedded else None)
        self.pg = None
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
        """Reserve the servers' group and start them: the dispatcher first (its address, known once its actor holds
        a port, is what the workers register with), then the workers. Returns without waiting for TF (wait_ready)."""
        cfg, d = self.cfg, self.cfg.data_service
        self.attempt, self.used, self.trained, self.service = attempt, set(), False, None
        bundles = rules.bundles(cfg)
        plan = Plan(tuple(TaskSpec(ROLE, i, i, d.cpus, 0.0, None, dict(d.resources)) for i in range(d.workers)),
                    "SPREAD")
        self.pg = placement.reserve(
            plan, timeout_s=cfg.cluster.placement_timeout_s, name=f"raytf:{cfg.run.name}:data_service",
            can_grow=not self.embedded, fix=rules.FIX,
            what=f"the tf.data service's placement group (data_service.workers={d.workers}, each "
                 f"{rules.fmt_bundle(bundles[0])})")
        self.slots = [_Slot(DISPATCHER, 0), *(_Slot(WORKER, i) for i in range(d.workers))]
        dispatcher = self.slots[0]
        self._create(dispatcher)
        self._address(dispatcher)
        for slot in self.slots:
            if slot is not dispatcher:
                self._create(slot)
            self._start(slot)

    def _create(self, slot: _Slot, port: int | None = None) -> None:
        cfg, d = self.cfg, self.cfg.data_service
        worker = slot.role == WORKER
        # The dispatcher reserves nothing of its own: it runs in worker 0's bundle (a restart lands on its node).
        slot.actor = _RemoteServer.options(
            num_cpus=d.cpus if worker else 0, resources=(dict(d.resources) or None) if worker else None,
            runtime_env=rules.runtime_env(cfg, slot.role), max_restarts=0, max_concurrency=2,
            scheduling_strategy=PlacementGroupSchedulingStrategy(self.pg, placement_group_bundle_index=slot.index),
        ).remote(slot.role, slot.index, tuple(cfg.cluster.port_range) if cfg.cluster.port_range else None,
                 self.advertise, port)

    def _address(self, slot: _Slot) -> None:
        timeout = self.cfg.cluster.startup_timeout_s
        try:
            slot.info = ray.get(slot.actor.address.remote(), timeout=timeout)
        except ray.exceptions.GetTimeoutError:
            raise WorkerError(f"tf.data service: the {slot.name} did not start within cluster.startup_timeout_s="
                              f"{timeout:g}s", role=ROLE, kind=failure.STARTUP) from None
        except RayError as e:
            raise WorkerError(f"tf.data service: the {slot.name} failed to start: {_first_line(e)}", role=ROLE,
                              kind=failure.STARTUP) from None
        if slot.info.get("port_error"):
            raise WorkerError(slot.info["port_error"], role=ROLE, node_id=slot.info["node_id"], kind=failure.CONFIG)

    def _start(self, slot: _Slot) -> None:
        dispatcher = self.slots[0].info
        slot.ref = slot.actor.start.remote(
            run_dir=self.run_dir, run_name=self.cfg.run.name, attempt=self.attempt, threads=rules.threads(self.cfg),
            dispatcher=f"{dispatcher['host']}:{dispatcher['port']}" if slot.role == WORKER else None,
            journal=slot.journal)
        slot.starting, slot.since = True, time.monotonic()

    def wait_ready(self) -> Service:
        """Every server up (TF's servers listening, the workers registered), within cluster.startup_timeout_s: the
        record the training tasks get. Raises WorkerError."""
        timeout = self.cfg.cluster.startup_timeout_s
        refs = [s.ref for s in self.slots]
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=timeout)
        for slot in self.slots:
            if slot.ref not in ready:
                raise WorkerError(f"tf.data service: the {slot.name} did not start within cluster.startup_timeout_s="
                                  f"{timeout:g}s", role=ROLE, node_id=slot.info.get("node_id", ""),
                                  kind=failure.STARTUP)
            why, config = self._started(slot)
            if why is not None:
                raise WorkerError(f"tf.data service: the {slot.name} did not start: {why}", role=ROLE,
                                  node_id=slot.info.get("node_id", ""),
                                  kind=failure.CONFIG if config else failure.STARTUP)
        dispatcher = self.slots[0].info
        d = self.cfg.data_service
        self.service = Service(dispatcher=f"{dispatcher['host']}:{dispatcher['port']}",
                               processing_mode=d.processing_mode.value, workers=d.workers, run=self.cfg.run.name,
                               attempt=self.attempt)
        self.attempts.append({"attempt": self.attempt, "dispatcher": self.service.dispatcher,
                              "workers": [_hostport(s.info) for s in self.slots[1:]], "used_by": []})
        log.info("tf.data service of %s (%s): dispatcher %s, workers %s", self.cfg.run.name, d.processing_mode.value,
                 self.service.dispatcher, ", ".join(self.attempts[-1]["workers"]))
        exposed = [_hostport(s.info) for s in self.slots if not tf_ports.is_loopback(s.info["host"])]
        if exposed and self.attempt == 1:
            log.warning("tf.data service: its servers accept anyone who can reach them (no authentication, no TLS): "
                        "%s; let only the cluster's hosts reach these ports (README: Security)", ", ".join(exposed))
        return self.service

    def _started(self, slot: _Slot) -> tuple[str | None, bool]:
        """A start() call returned: (None, _) and the slot now serves, or (why it did not start, whether no restart
        can help: a port taken)."""
        try:
            out = ray.get(slot.ref)
        except RayActorError as e:
            return f"its actor died ({_first_line(e)})", False
        except RayError as e:
            return _first_line(e), False
        slot.info = out.get("address") or slot.info
        if not out.get("ok"):
            return out.get("error", "unknown"), bool(out.get("config"))
        slot.journal = out.get("journal") or slot.journal
        slot.starting, slot.ref = False, slot.actor.serve.remote()
        return None, False

    # -- while it trains ---------------------------------------------------------------------------------------------
    def poll(self) -> WorkerError | None:
        """Once per round of the attempt loop: a server that died is started again at its address, in its bundle (the
        dispatcher from its journal); one that cannot be is the attempt's failure (returned)."""
        if self.service is None:
            return None
        watched = {s.ref: s for s in self.slots if s.ref is not None}
        ready, _ = ray.wait(list(watched), num_returns=len(watched), timeout=0)
        for ref in ready:
            slot = watched[ref]
            if slot.starting:
                why, config = self._started(slot)
                if why is None:
                    log.info("tf.data service: %s is back (%s)", slot.name, _hostport(slot.info))
                    self.attempts[-1]["workers" if slot.role == WORKER else "dispatcher"] = (
                        [_hostport(s.info) for s in self.slots[1:]] if slot.role == WORKER else _hostport(slot.info))
                    continue
                if config:
                    return WorkerError(why, role=ROLE, node_id=slot.info.get("node_id", ""), kind=failure.CONFIG)
            else:
                why = "its actor died (its process or node was lost)"
            error = self._lost(slot, why)
            if error is not None:
                return error
        timeout = self.cfg.cluster.startup_timeout_s
        for slot in self.slots:
            if slot.starting and time.monotonic() - slot.since > timeout:
                error = self._lost(slot, f"not started again within cluster.startup_timeout_s={timeout:g}s")
                if error is not None:
                    return error
        return None

    def _lost(self, slot: _Slot, why: str) -> WorkerError | None:
        node = slot.info.get("node_id", "")
        self.lost.append({"attempt": self.attempt, "server": slot.name, "host": slot.info.get("host"),
                          "time": time.time(), "cause": why})
        decision = rules.on_lost(slot.role, slot.index, slot.restarts, why, node_alive=nodes.is_alive(node))
        if isinstance(decision, rules.Fail):
            return WorkerError(decision.message, role=ROLE, node_id=node, kind=decision.kind)
        log.warning("%s", rules.lost_line(slot.role, slot.index, why, self.cfg.data_service.processing_mode))
        _kill(slot.actor)
        slot.restarts += 1
        self._create(slot, slot.info.get("port"))
        self._start(slot)
        return None

    def nodes(self) -> dict[str, list[str]]:
        """Node -> the names of the servers on it (a drain notice of one of them moves the run off it)."""
        out: dict[str, list[str]] = {}
        for slot in self.slots:
            if node := slot.info.get("node_id"):
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
        """After every attempt (success, failure, Ctrl-C): the servers killed and their processes waited for, their
        group released, the dispatcher's journal removed from its node."""
        if self.service is not None and self.trained and not self.used:
            log.warning("%s", rules.unused(self.cfg.data_service.workers))
        slots, self.slots, self.service = self.slots, [], None
        refs = [s.ref for s in slots if s.ref is not None]
        for slot in slots:
            _kill(slot.actor)
        if refs:  # each pending call fails once its actor is gone: the processes are
            ray.wait(refs, num_returns=len(refs), timeout=10)
        placement.release(self.pg)
        self.pg = None
        node = slots[0].info.get("node_id") if slots else None
        if node and nodes.is_alive(node):  # bounded, and never a reason to fail (the next attempt's sweep runs too)
            ref = _sweep.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False)).remote(
                slots[0].journal)
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


def _hostport(info: dict[str, Any]) -> str:
    return f"{info.get('host')}:{info.get('port')}"


def _first_line(e: BaseException) -> str:
    lines = [line for line in str(e).strip().splitlines() if line.strip()]
    return lines[0] if lines else type(e).__name__


def _kill(actor) -> None:
    if actor is None:
        return
    try:
        ray.kill(actor, no_restart=True)
    except RayError as e:
        log.debug("kill: %s", e)
