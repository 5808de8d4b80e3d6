"""One attempt's task group: placement group, event bus and task actors, from reservation to teardown.

Imports Ray, never TensorFlow.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import ray
from ray.exceptions import ActorUnavailableError, GetTimeoutError, RayActorError, RayError, RuntimeEnvSetupError
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy, PlacementGroupSchedulingStrategy

from raytf._core import brief, failure, shipping, topology
from raytf._core import events as ev
from raytf._core.function import Functions
from raytf._core.plan import EVALUATOR, Plan, TaskSpec, actor_env, actor_name, is_server, streamed, task_runtime_env
from raytf._core.tasks import TaskInfo, TaskRun, local_sweeps
from raytf._driver import nodes, placement, stacks, standby
from raytf._driver.usercode import CodePlan
from raytf._storage import RunDir

# The one task-side module the driver imports: Ray needs the class (and the sweep's functions).
from raytf._task.actor import TaskActor, here, sweep_after
from raytf.config import SINGLE_TASK_STRATEGIES, Config, script_mode, task_view
from raytf.config.redact import secret_runtime_env
from raytf.errors import ConfigError, StorageError, WorkerError

log = logging.getLogger("raytf")

_RemoteTask = ray.remote(TaskActor)
# Threaded: drain(), wait_stop() and wait_control() block while tasks keep pushing. The tasks' pushes run on a
# thread of their own (PUSH_GROUP), one at a time: on the threads of the blocking calls, hundreds of concurrent
# pushes mostly waited for each other (Ray's deserialization lock, the buffer's), and could land out of order
# (raytf issue 38).
_RemoteBus = ray.remote(num_cpus=0, concurrency_groups={ev.PUSH_GROUP: 1})(ev.EventBuffer)


class TaskGroup:
    """Reserve, start and wire the tasks of one attempt; always `teardown()` afterwards.

    Failures while starting raise WorkerError (kind "startup", or the task's own) or StorageError."""

    def __init__(self, cfg: Config, plan: Plan, run_dir: RunDir, *, embedded: bool,
                 code: CodePlan | None = None, pg=None, servers: Servers | None = None) -> None:
        self.cfg, self.plan, self.run_dir, self.embedded = cfg, plan, run_dir, embedded
        self.code = code  # what each task checks it has of the program (None: nothing)
        self.pg = pg  # the placement group reserved for this plan (AttemptRunner.place): released by teardown
        self.servers = servers  # raytf's own servers' group (the tf.data service's), not the run's tasks
        self._remote = servers.remote if servers is not None else _RemoteTask
        self._bundle = servers.bundles if servers is not None else tuple(range(len(plan.tasks)))
        self.bus = None
        self.actors: list = []
        self.infos: list[TaskInfo] = []
        self.unavailable: set[int] = set()  # ranks whose actor Ray could not reach (ActorUnavailableError)
        self.adopted: set[int] = set()  # ranks a standby process took (raytf/_driver/standby.py)
        self.standbys: standby.Slots | None = None  # where standbys could take this group's tasks

    def info(self, rank: int) -> TaskInfo | None:
        return next((i for i in self.infos if i.rank == rank), None)

    def node_of(self, rank: int) -> str:
        """The node a task of this attempt runs on ("" when not known)."""
        info = self.info(rank)
        return info.node_id if info is not None else ""

    def start(self, pg=None) -> None:
        """Start the tasks in the group's placement group (or `pg`, given now)."""
        cfg = self.cfg
        self.pg = pg if pg is not None else self.pg
        # Every task may hold two blocking calls on the bus (control listener, serve), plus the driver's. On the
        # driver's own node: the bus keeps the run's bookkeeping, and a lost host must cost an attempt no more
        # than its tasks. Left to Ray, this 0-CPU actor landed on a worker's host, which was then partitioned,
        # and the driver died of ActorDiedError (raytf issue 16). Unnamed: only those handed its handle (the
        # tasks) can reach it; a named one could be drained or stopped by any client of the cluster (issue 19).
        self.bus = _RemoteBus.options(
            max_concurrency=2 * len(self.plan.tasks) + 8,
            scheduling_strategy=NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=False),
        ).remote()
        # Standbys are made by the job's pool actor, which is sent their runtime_env: not one whose entries look like
        # secrets (they would travel to and stay in one more process; raytf issue 19's rule).
        self.standbys = (standby.Slots.of(cfg, self.plan, self.pg, self._runs_script)
                         if cfg.cluster.standby > 0 and self.servers is None
                         and not secret_runtime_env(cfg.ray.runtime_env) else None)
        taken = self.standbys.take() if self.standbys is not None else {}
        self.actors = [self._start_task(t, i, taken.get(i)) for i, t in enumerate(self.plan.tasks)]

    def refill(self) -> None:
        """Ask for standbys in place of this attempt's tasks (standby.Slots.refill): also after the teardown."""
        if self.standbys is not None:
            self.standbys.refill()

    def refill_off(self, node: str, draining: set[str]) -> None:
        """A drain notice for `node`: standbys for its tasks on other nodes (standby.Slots.refill_off)."""
        if self.standbys is not None:
            self.standbys.refill_off(node, draining)

    def _start_task(self, t: TaskSpec, i: int, standby_actor=None, port: int | None = None):
        """The task `t`, the plan's i-th, in its bundle (`port`: its predecessor's, held again: replace)."""
        cfg = self.cfg
        runtime_env, env = actor_env(self.servers.runtime_env(cfg, t) if self.servers is not None else
                                     task_runtime_env(cfg, t))
        advertise = cfg.cluster.advertise_address or ("127.0.0.1" if self.embedded else None)
        if standby_actor is not None:  # TensorFlow imported already; the task's bundle stays reserved for it
            standby_actor.adopt.remote(t, advertise)
            self.adopted.add(t.rank)
            return standby_actor
        options: dict[str, Any] = dict(
            name=actor_name(cfg.run.name, t.role, t.rank), num_cpus=t.cpus, num_gpus=t.gpus,
            resources=t.custom or None, max_restarts=0,
            scheduling_strategy=PlacementGroupSchedulingStrategy(self.pg, placement_group_bundle_index=self._bundle[i]),
        )
        if runtime_env:  # (none: a worker Ray pre-started can take it; `env` then goes to the process itself)
            options["runtime_env"] = runtime_env
        if t.memory_bytes:
            options["memory"] = t.memory_bytes
        return self._remote.options(**options).remote(t, advertise, env, script=self._runs_script(t), port=port)

    def _runs_script(self, t: TaskSpec) -> bool:
        """Whether `t` runs the user's script (run_script): every task of a script's run but a server."""
        return self.servers is None and script_mode(self.cfg) and not is_server(self.cfg.cluster.strategy, t.role)

    def replace(self, rank: int):
        """Start the task of `rank` again at its address: its actor killed (if it still runs), a new one in its bundle
        (so on its node) holding its port again. Returns the new actor; its calls are the caller's to make (the
        tf.data service's servers; a per-role restart could use it too), and `readdressed` its new TaskInfo. The
        new actor's port_error says when another process took the port meanwhile."""
        i = next(k for k, t in enumerate(self.plan.tasks) if t.rank == rank)
        t, info = self.plan.tasks[i], self.info(rank)
        _kill(self.actors[i])
        if rank not in self.adopted:
            _wait_names_free([actor_name(self.cfg.run.name, t.role, t.rank)], time.monotonic() + 30)
        self.adopted.discard(rank)
        self.actors[i] = self._start_task(t, i, port=info.port if info is not None else None)
        return self.actors[i]

    def readdressed(self, info: TaskInfo) -> None:
        """A replaced task's TaskInfo (its new process; the same node and port)."""
        self.infos = [info if i.rank == info.rank else i for i in self.infos]

    def addresses(self) -> list[TaskInfo]:
        """Each task's node, address and held port; also checks that every task holds a port (of
        cluster.port_range), sees the run directory and has the program."""
        timeout = self.cfg.cluster.startup_timeout_s
        marker = self.run_dir.write_storage_marker()
        needs = [self.code.needs_of(self.cfg, t.role) if self.code else None for t in self.plan.tasks]
        try:
            self.infos = ray.get([a.address.remote(self.run_dir.marker(marker), n) for a, n in zip(self.actors, needs)],
                                 timeout=timeout)
        except GetTimeoutError:
            raise WorkerError(f"tasks did not start within cluster.startup_timeout_s={timeout:g}s",
                              kind=failure.STARTUP) from None
        except RuntimeEnvSetupError as e:  # (a page of traceback; a retry would meet the same runtime_env)
            raise ConfigError(shipping.setup_failure(str(e))) from None
        except RayError as e:
            raise WorkerError(f"a task failed to start: {e}", kind=failure.STARTUP) from None
        finally:
            self.run_dir.remove_storage_marker(marker)
        portless = next((i for i in self.infos if i.port_error), None)
        if portless is not None:  # a "config" failure: never retried (see failure.CONFIG)
            raise WorkerError(portless.port_error, role=portless.role, rank=portless.rank, node_id=portless.node_id,
                              kind=failure.CONFIG)
        blind = [i for i in self.infos if i.storage_visible is False]
        if blind:
            who = brief.few(f"{i.role} {i.rank} on node {i.node_id[:12]}" for i in blind)
            raise StorageError(
                f"storage.path ({self.cfg.storage.path!r}) is not visible from {who}: the driver wrote "
                f"{self.run_dir.uri} but those nodes cannot read it (a local path on one machine is not shared "
                "with the others). Fix: use shared storage: an NFS path mounted at the same place on every node, "
                "or an object store URI such as s3://bucket/runs or gs://bucket/runs")
        if self.code is not None:
            self.code.refuse_missing(self.infos)  # a ConfigError: never retried (the next attempt lands there too)
        return self.infos

    def launch(self, *, attempt: int, python_path: list[str], resume_from, max_workers: int | None = None,
               datasets: dict[int, dict[str, Any]] | None = None,
               functions: Functions | None = None, data_service=None) -> tuple[dict, dict]:
        """Start the training: (primary, background) refs to each task's call. The end of every primary
        ref (MWMS workers, the PS chief) is the end of training; background ones are the PS servers'
        serve() and the evaluator's run(). `datasets`: rank -> {name: ray.data.DataIterator} (Ray Data input);
        `functions`: the functions given as values (a task running a function gets its role's, pickled);
        `data_service`: the run's tf.data service (a _core.dataservice.Service), for the tasks running user code."""
        datasets = datasets or {}
        functions = functions or Functions()
        cfg, bus = self.cfg, self.bus
        spec = topology.cluster_spec([topology.TaskAddress(i.role, i.index, i.host, i.port) for i in self.infos])
        # The tasks' view of the config: no `ray` section (runtime_env values: Ray sets them up), no storage keys.
        common = TaskRun(cfg=task_view(cfg), run_dir=self.run_dir, bus=bus, attempt=attempt,
                         python_path=tuple(python_path))
        primary: dict = {}
        background: dict = {}
        servers = [(a, t) for a, t in zip(self.actors, self.plan.tasks) if is_server(cfg.cluster.strategy, t.role)]
        if servers:
            self._start_servers(servers, spec, common)
            for a, t in servers:
                background[a.serve.remote(bus=bus)] = t
        single = cfg.cluster.strategy in SINGLE_TASK_STRATEGIES
        for a, t in zip(self.actors, self.plan.tasks):
            if is_server(cfg.cluster.strategy, t.role):
                continue
            run = dataclasses.replace(
                common, tf_config=None if single else topology.tf_config(spec, t.role, t.index),
                resume_from=resume_from, is_chief=topology.is_chief(spec, t.role, t.index), max_workers=max_workers,
                stream=streamed(cfg.train.stream_output, t.rank), datasets=datasets.get(t.rank),
                function=None if script_mode(cfg) else functions.for_role(t.role), data_service=data_service)
            ref = (a.run_script if script_mode(cfg) else a.run).remote(run)
            (background if t.role == EVALUATOR else primary)[ref] = t
        return primary, background

    def _start_servers(self, servers: list, spec: dict, common: TaskRun) -> None:
        """PS and worker servers must listen before the coordinator connects to them."""
        timeout = self.cfg.cluster.startup_timeout_s
        refs = {a.start_server.remote(dataclasses.replace(
                    common, tf_config=topology.tf_config(spec, t.role, t.index),
                    stream=streamed(self.cfg.train.stream_output, t.rank))): t
                for a, t in servers}
        ready, _ = ray.wait(list(refs), num_returns=len(refs), timeout=timeout)
        for ref in ready:
            error = self.outcome(ref, refs[ref])
            if error is not None:
                raise error
        if len(ready) < len(refs):
            raise WorkerError(f"parameter-server tasks did not start within cluster.startup_timeout_s="
                              f"{timeout:g}s", kind=failure.STARTUP)

    def outcome(self, ref, t: TaskSpec) -> WorkerError | None:
        """None when the task's call succeeded, else its WorkerError (a dead actor is a "system" failure)."""
        node = self.node_of(t.rank)
        try:
            out = ray.get(ref)
        except RayActorError as e:
            if isinstance(e, ActorUnavailableError):
                self.unavailable.add(t.rank)
            return WorkerError(f"the task's actor died: {e}", role=t.role, rank=t.rank, node_id=node,
                               kind=failure.SYSTEM)
        except RayError as e:
            return WorkerError(f"{type(e).__name__}: {e}", role=t.role, rank=t.rank, node_id=node,
                               remote_traceback=str(e), kind=failure.SYSTEM)
        return out.error

    def hang_error(self, rank: int, attempt: int, busy_with: str | None = None) -> WorkerError:
        """A rank without progress for failure.hang_timeout_s (_driver/stacks.py: its stacks saved and named)."""
        return stacks.hang_error(self.info(rank), rank, attempt, self.cfg.failure.hang_timeout_s, self.run_dir,
                                 busy_with=busy_with)

    def teardown(self, skip: set[str] = frozenset()) -> None:
        """Kill every task and the bus, release the placement group, and wait until the tasks' names are
        free again (a relaunch with the same run.name reuses them; the bus has none)."""
        for a in [*self.actors, *([self.bus] if self.bus is not None else [])]:
            _kill(a)
        placement.release(self.pg)
        _wait_names_free([actor_name(self.cfg.run.name, t.role, t.rank) for t in self.plan.tasks[: len(self.actors)]
                          if t.rank not in self.adopted],  # (a standby keeps the name it never had: none)
                         time.monotonic() + 30)
        self.actors, self.bus, self.pg = [], None, None
        self._sweep_scratch(skip)

    def _sweep_scratch(self, skip: set[str], timeout_s: float = 5.0) -> None:
        """The killed tasks' scratch directories (ray.kill skips their `finally`), on the nodes that are up and
        reachable; bounded, and never a reason to fail (the next task on the node sweeps too)."""
        on = {i.node_id for i in self.infos} - skip - {None, ""}
        local, roots = local_sweeps([i for i in self.infos if i.node_id in on], here())
        standby.note_local({i.node_id: i.scratch_root for i in self.infos if i.node_id in local})
        rest = on - local
        elsewhere = rest & nodes.alive() if rest else set()  # (nodes Ray knows alive: no sweep sent to a lost one)
        sweep_after(roots, {n: tuple(i.pid for i in self.infos if i.node_id == n and i.pid) for n in elsewhere},
                    timeout_s)


@dataclass(frozen=True)
class Servers:
    """A group of raytf's own servers instead of the run's tasks (the tf.data service's, _driver/dataservice.py):
    their actor class (`remote`: a TaskActor's subclass, ray.remote'd), each task's bundle index in the group's
    placement group, and their runtime_env. They run no user code: no standbys, no script's child."""

    remote: Any
    bundles: tuple[int, ...]
    runtime_env: Callable[[Config, TaskSpec], dict[str, Any]]


def _kill(actor) -> None:
    try:
        ray.kill(actor, no_restart=True)
    except RayError as e:
        log.debug("kill: %s", e)


def _wait_names_free(names: list[str], deadline: float) -> None:
    """Until the killed tasks' actor names are free again (a relaunch with the same run.name, a replaced task,
    reuses them), bounded by `deadline` (monotonic)."""
    for name in names:
        while time.monotonic() < deadline:
            try:
                ray.get_actor(name)
            except ValueError:
                break
            time.sleep(0.05)  # polling the GCS for the name to be released, bounded by deadline
