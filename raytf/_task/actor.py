"""The Ray actor that hosts one TF task. TensorFlow is imported inside its methods (which run in the task's
process), never at module level, so the driver (which imports this module to create actors) stays free of it.
Every task's runtime_env (plan.task_runtime_env, TASK_ENV) is in place before that first import: set by Ray at the
process's start, or by the actor itself, first thing (`env`: plan.actor_env)."""

from __future__ import annotations

import errno
import logging
import os
import secrets
import socket
from typing import Any

import ray
from ray.exceptions import RayError
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from raytf._core import events as ev
from raytf._core import failure, limits, tf_ports
from raytf._core.plan import TaskSpec
from raytf._core.shipping import CodeNeeds
from raytf._core.tasks import TaskInfo, TaskOutcome, TaskRun
from raytf._storage import StorageMarker
from raytf._task import rss, scratch, usercode
from raytf._task.call import TaskCall
from raytf._task.tee import OutputCapture

log = logging.getLogger(__name__)


def reserve_port(port_range: tuple[int, int] | None = None, again: int | None = None) -> socket.socket | None:
    """Bind a free port (one of `port_range` when given, each tried once from a random offset; `again`: that port,
    a replaced task's, TaskGroup.replace) and keep holding it until TF's server has bound the same port; None when
    every port of the range (or `again`) is taken.

    Bind-close-publish lets another process take the port before TF binds it (tensorflow#21492). The socket
    binds without SO_REUSEPORT, so the bind fails while any other socket holds the port (another task's too: two
    SO_REUSEPORT sockets of one user may share a port, and two TF servers would then split its connections), and
    sets it after: every other binder stays out, while TF's server, started with TF_GRPC_REUSE_PORT, can bind the
    port (a bound socket that does not listen takes none of its connections).

    A port held `again` is bound with SO_REUSEADDR: the predecessor's connections linger in TIME_WAIT on it for a
    minute after its death, which would refuse a plain bind (still refused while another socket listens on the
    port, or holds it as this function does without SO_REUSEADDR).
    """
    if again is not None:
        order = [again]
    elif port_range is None:
        order = [0]  # the OS picks a free one
    else:
        low, high = port_range
        order = tf_ports.candidates(low, high, secrets.randbelow(high - low + 1))
    for port in order:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if again is not None:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("", port))
        except OSError as e:
            sock.close()
            if port == 0 or e.errno != errno.EADDRINUSE:
                raise
            continue
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        return sock
    return None


def sweep_here(pids: tuple[int, ...] = ()) -> list[str]:
    """On a node after an attempt's teardown: the scratch directories its killed tasks left, once their processes
    (`pids`, on this node) are gone. The driver runs it as a Ray task on each node (`sweep_scratch`) whose tasks
    do not share its place (`sweep_roots` otherwise)."""
    scratch.wait_gone(pids)
    return scratch.sweep()


sweep_scratch = ray.remote(num_cpus=0)(sweep_here)


def sweep_roots(roots: dict[str, tuple[int, ...]]) -> list[str]:
    """The same sweep in the driver's own process, of the roots its tasks reported (TaskInfo.scratch_root, with their
    pids): for the nodes whose tasks share the driver's place (machine, namespaces, user: tasks.local_sweeps),
    as on an embedded Ray, where a Ray task would first need a worker process (~0.7-0.9 s a teardown:
    benchmarks/scratch_sweep.py). Their roots, not the driver's own: its temporary directory need not be theirs (the
    soak benchmark sets them apart; a notebook may change it after `ray.init`)."""
    scratch.wait_gone({p for pids in roots.values() for p in pids})
    return [path for root in roots for path in scratch.sweep(root, drop_root=True)]


def sweep_after(roots: dict[str, tuple[int, ...]], on_nodes: dict[str, tuple[int, ...]], timeout_s: float) -> None:
    """The driver's sweep of killed task processes' scratch (an attempt's teardown, the standbys' release): the
    `roots` of the nodes that share its place in its own process (`sweep_roots`), and each of `on_nodes` (node ->
    pids; nodes that are up) by a Ray task there (`sweep_scratch`). Bounded by `timeout_s`, and never a reason to
    fail: the next task on a node sweeps too."""
    if roots:
        try:
            sweep_roots(roots)
        except OSError as e:
            log.debug("scratch sweep: %s", e)
    refs = [sweep_scratch.options(scheduling_strategy=NodeAffinitySchedulingStrategy(n, soft=False)).remote(pids)
            for n, pids in on_nodes.items()]
    ready, _ = ray.wait(refs, num_returns=len(refs), timeout=timeout_s) if refs else ([], [])
    for ref in ready:
        try:
            ray.get(ref)
        except RayError as e:
            log.debug("scratch sweep: %s", e)


def here() -> str:
    """The driver's place, to compare with its tasks' (scratch.place)."""
    return scratch.place()


class TaskActor:
    """One TF task. Lifecycle: __init__ (reserve the port) -> address() -> run(TaskRun) (or run_script, or
    start_server then serve). Each call is a `TaskCall` (_task/call.py) and returns a `TaskOutcome`.

    Or a standby (raytf/_driver/standby.py): made with no spec, `warm()` imports TensorFlow and tf-keras (no
    strategy, no device touched: a process can build a collective strategy only once, and a GPU is only ever
    touched by the task it is given), and `adopt(spec, ...)` later makes it a task, as __init__ would have.

    A task that will run a script (`script`), or a standby for one (`warm(script=True)`), holds a child process that
    imports TensorFlow while the task is still being set up (script/spawn.py's WarmChild): its script starts in it
    (run_script). The actor's own process then never imports TensorFlow."""

    def __init__(self, spec: TaskSpec | None, advertise_address: str | None,
                 env: dict[str, str] | None = None, script: bool = False, port: int | None = None) -> None:
        # First, before TensorFlow's import: raytf's variables when its runtime_env did not bring them (a worker
        # Ray pre-started: plan.actor_env), over whatever the worker had (Ray's own OMP_NUM_THREADS among them).
        os.environ.update(env or {})
        # Then this process's temporary directory is a scratch directory it owns, swept once it is gone (ray.kill
        # skips the exit handlers that delete autograph's files).
        scratch.own_tempdir()
        self._server = None  # ParameterServerStrategy ps/worker: TF's in-process server
        self._output: OutputCapture | None = None  # a server's, from start_server until serve() returns
        self._sock: socket.socket | None = None
        self._child = None  # a script's warm child (script/spawn.py), until run_script takes it
        if spec is not None:
            self.adopt(spec, advertise_address, port)
        if script:  # its TensorFlow import runs beside the addressing, the other tasks' start, the driver's setup
            self._start_child(idle=False)  # (at the normal priority: this task's first step waits for it)

    def warm(self, script: bool = False) -> dict[str, Any]:
        """A standby's start: TensorFlow and tf-keras imported (raytf/_task/warm.py); for a script's task, in the
        child process its script will run in (script/spawn.py)."""
        if script:
            return {"pid": os.getpid(), "import_s": self._start_child(idle=True).ready()}
        from raytf._task import warm

        return {"pid": os.getpid(), "import_s": warm.import_tensorflow()}

    def _start_child(self, idle: bool):
        from raytf._task.script.spawn import WarmChild

        # In this process's own temporary directory (scratch.own_tempdir): the script's is its scratch's work/.
        self._child = WarmChild(cwd=scratch.own_tempdir(), idle=idle)
        return self._child

    def _take_child(self):
        """The warm child, now the caller's (None without one)."""
        child, self._child = self._child, None
        return child

    def _drop_child(self) -> None:
        """A task that runs no script (a function, a PS server) in a process made for one: its child goes."""
        if (child := self._take_child()) is not None:
            child.close()

    def adopt(self, spec: TaskSpec, advertise_address: str | None, port: int | None = None) -> None:
        """Become the task `spec`: hold its port (`port`: a replaced task's, TaskGroup.replace). Called by
        __init__, or on a standby given a task."""
        self.spec = spec
        self._host = advertise_address or ray.util.get_node_ip_address()
        self._sock = reserve_port(spec.port_range, again=port)
        self._port = self._sock.getsockname()[1] if self._sock is not None else None
        # Every port of cluster.port_range taken: address() says so and the driver fails the run. (Raised here, it
        # would kill the actor and reach the driver as a start-up failure, which it retries.)
        self._no_port = None if self._sock is not None else (
            tf_ports.taken_again(port, spec.role, spec.index, self._host) if port is not None else
            tf_ports.none_free(spec.port_range, self._host))
        self.node_id = ray.get_runtime_context().get_node_id()

    def address(self, marker: StorageMarker | None = None, code: CodeNeeds | None = None) -> TaskInfo:
        """Where this task listens, what it holds, whether it sees the driver's storage marker and what of the
        program (`code`) it lacks."""
        return TaskInfo(
            role=self.spec.role, index=self.spec.index, rank=self.spec.rank, host=self._host, port=self._port,
            node_id=self.node_id, pid=os.getpid(), gpu_ids=tuple(str(g) for g in ray.get_gpu_ids()),
            cuda_visible_devices=os.environ.get("CUDA_VISIBLE_DEVICES"), port_error=self._no_port,
            storage_visible=marker.visible() if marker is not None else None,
            code_missing=tuple(usercode.missing(code)) if code is not None else (),
            scratch_root=scratch.root(), place=scratch.place(), memory_gib=rss.node_gib())

    def release_port(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def start_server(self, run: TaskRun) -> TaskOutcome:
        """ParameterServerStrategy ps/worker task: start TF's gRPC server; returns once it listens. Its output stays
        captured until serve() returns."""
        from raytf._task import roles

        self._drop_child()
        with TaskCall(self, run, kind=lambda e: failure.SYSTEM, keep_output=True) as call:
            self._server = roles.start_server(call)
        self._output = call.output
        return call.outcome

    def serve(self, *, bus) -> TaskOutcome:
        """Keep the server task alive until the driver says training is over. The call's result is
        how the driver learns that this task died (the ref fails with RayActorError)."""
        ray.get(bus.wait_stop.remote(None))
        output, self._output = self._output, None
        if output is not None:
            output.close()
        return TaskOutcome()

    def run(self, run: TaskRun) -> TaskOutcome:
        """Run the user's function: every MWMS worker, the PS chief (coordinator), or the evaluator. Errors in user
        code come back as the outcome's WorkerError, with the traceback."""
        from raytf._task import dataservice, roles

        self._drop_child()
        dataservice.export(run.data_service)  # (ctx.data_service)
        with TaskCall(self, run) as call:
            roles.run_function(call)
        return call.outcome

    def run_script(self, run: TaskRun) -> TaskOutcome:
        """Script mode: run the user's program (train.script / train.module) in a child process with this
        task's TF_CONFIG; its exit code is the outcome. The port stays held until the child exits: its TF
        server binds it whenever the script creates its strategy (TF_GRPC_REUSE_PORT is inherited). Its Ray
        Data shares (run.datasets) are served to the script's raytf.dataset (script/feed.py)."""
        from raytf._task import dataservice
        from raytf._task.script.host import ScriptHost
        from raytf._task.script.spanning import ClusterNotUsed

        dataservice.export(run.data_service)  # (raytf.data_service: the child inherits it in its environment)

        def kind(e: BaseException) -> str:
            return failure.USER if isinstance(e, (ClusterNotUsed, limits.TooManyMetrics)) else failure.SYSTEM

        warm = self._take_child()
        try:
            with TaskCall(self, run, kind=kind) as call:
                host = ScriptHost(cfg=run.cfg, spec=self.spec, run_dir=run.run_dir, emit=call.emit,
                                  attempt=run.attempt, is_chief=run.is_chief, scratch=call.scratch(),
                                  log_file=call.output.file, stream=run.stream, datasets=run.datasets, warm=warm)
                host.restore(run.resume_from)
                call.on_sigterm(lambda: call.emit(ev.PREEMPTED, ev.Notice(step=host.position[1])))
                code, tail = host.run(host.environment(run))
                if code == 0:
                    epoch, step = host.position
                    call.succeeded(epoch=epoch, step=step)
                else:
                    call.failed(host.exit_error(code, tail, self.node_id))
        finally:
            if warm is not None:
                warm.close()  # (nothing, once the script ran in it: the host's then)
        return call.outcome
