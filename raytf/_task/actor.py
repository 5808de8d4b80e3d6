"""The Ray actor that hosts one TF task. TensorFlow is imported inside its methods (which run in the task's
process), never at module level, so the driver (which imports this module to create actors) stays free of it.
Every task's runtime_env (plan.task_runtime_env, TASK_ENV) is in place before that first import."""

from __future__ import annotations

import errno
import importlib
import json
import logging
import os
import secrets
import signal
import socket
import sys
import threading
import traceback
from collections.abc import Callable
from typing import Any

import ray

from raytf._core import events as ev
from raytf._core import failure, limits, ports
from raytf._core.function import PickledFunction
from raytf._core.plan import TaskSpec
from raytf._core.shipping import CodeNeeds
from raytf._storage import RunDir, task_log, task_log_dir, task_workdir
from raytf._task import scratch, usercode
from raytf._task.lines import OWN_FORMAT, Shown
from raytf._task.scratch import Scratch
from raytf._task.tee import OutputCapture
from raytf._task.upload import upload_outputs
from raytf.config import Config
from raytf.errors import WorkerError

log = logging.getLogger(__name__)


def reserve_port(port_range: tuple[int, int] | None = None) -> socket.socket | None:
    """Bind a free port (one of `port_range` when given, each tried once from a random offset) and keep holding
    it until TF's server has bound the same port; None when every port of the range is taken.

    Bind-close-publish lets another process take the port before TF binds it (tensorflow#21492). The socket
    binds without SO_REUSEPORT, so the bind fails while any other socket holds the port (another task's too: two
    SO_REUSEPORT sockets of one user may share a port, and two TF servers would then split its connections), and
    sets it after: every other binder stays out, while TF's server, started with TF_GRPC_REUSE_PORT, can bind the
    port (a bound socket that does not listen takes none of its connections).
    """
    if port_range is None:
        order = [0]  # the OS picks a free one
    else:
        low, high = port_range
        order = ports.candidates(low, high, secrets.randbelow(high - low + 1))
    for port in order:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
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


def import_entrypoint(entrypoint: str):
    module_name, _, fn_name = entrypoint.partition(":")
    module = importlib.import_module(module_name)
    try:
        return getattr(module, fn_name)
    except AttributeError:
        raise AttributeError(f"train.entrypoint: module {module_name!r} has no function {fn_name!r}") from None


def load_function(function: PickledFunction):
    """A function given to raytf.fit as a value (train_fn=, eval_fn=): unpickled here, once the task's python_path
    is in place (one pickled by reference imports its module now; one sent by value imports nothing of the
    driver's __main__). Ray's cloudpickle wrote it; plain pickle reads it."""
    import pickle

    return pickle.loads(function.data)


def _task_logging() -> None:
    # Only raytf's own logger: raising the root level would unmute TensorFlow's chatter too. Its lines reach the
    # driver as the task's output, which the driver prefixes with role and rank (`[worker 1] WARNING raytf...`);
    # `lines.Shown` knows them by their format (and shows them from every rank from WARNING up).
    logger = logging.getLogger("raytf")
    if not logger.handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter(OWN_FORMAT))
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
        # Our handler prints it; a root handler that the user's code or a library set up (basicConfig) would
        # print every line a second time, as "INFO:raytf.context:...".
        logger.propagate = False


class _Emitter:
    """Event pushes without waiting for each, at most limits.MAX_INFLIGHT_PUSHES in flight (past it, a push
    waits for room: the task slows to the bus' pace); `flush` waits until every push has landed on the bus."""

    def __init__(self, bus, role: str, rank: int, attempt: int) -> None:
        self.bus, self.role, self.rank, self.attempt = bus, role, rank, attempt
        self._inflight = limits.Inflight(lambda refs, n, t: ray.wait(refs, num_returns=n, timeout=t))
        self._lock = threading.Lock()  # the training thread and the checkpoint uploader both emit
        self.dropped = 0  # events the bus may merge anyway, not sent while it took none for wait_s

    def __call__(self, kind: str, payload: dict[str, Any]) -> None:
        with self._lock:
            if not self._inflight.room() and kind in ev.COALESCED:
                self.dropped += 1
                if self.dropped == 1:
                    log.warning("the event bus took none of %d pushes in %gs: %s events are dropped while it "
                                "takes none", self._inflight.cap, self._inflight.wait_s,
                                "/".join(sorted(ev.COALESCED)))
                return
            self._inflight.add(self.bus.push.remote([ev.Event(kind, self.role, self.rank, self.attempt, payload)]))

    def flush(self, timeout: float = 30.0) -> None:
        with self._lock:
            refs = self._inflight.take()
        if refs:
            ray.wait(refs, num_returns=len(refs), timeout=timeout)


class _WorkingDir:
    """The training function runs in a directory of its own (relative paths it writes, a ModelCheckpoint("ckpt")
    say, would otherwise collide between the tasks of one host); imports keep resolving as before."""

    def __init__(self, path: str) -> None:
        self.path = path
        os.makedirs(path, exist_ok=True)
        self._was = ""

    def __enter__(self) -> _WorkingDir:
        self._was = os.getcwd()
        # sys.path's "" (or ".") means the current directory: it keeps meaning the one the task started in.
        sys.path[:] = [self._was if p in ("", ".") else p for p in sys.path]
        os.chdir(self.path)
        return self

    def __exit__(self, *exc) -> None:
        os.chdir(self._was)


@ray.remote(num_cpus=0)
def sweep_scratch(pids: tuple[int, ...] = ()) -> list[str]:
    """Run on a node by the driver after an attempt's teardown: the scratch directories its killed tasks left, once
    their processes (`pids`, on this node) are gone."""
    scratch.wait_gone(pids)
    return scratch.sweep()


class TaskActor:
    """One TF task. Lifecycle: __init__ (reserve the port) -> address() -> run(TF_CONFIG, ...).

    Or a standby (raytf/_driver/standby.py): made with no spec, `warm()` imports TensorFlow and tf-keras (no
    strategy, no device touched: a process can build a collective strategy only once, and a GPU is only ever
    touched by the task it is given), and `adopt(spec, ...)` later makes it a task, as __init__ would have."""

    def __init__(self, spec: TaskSpec | None, advertise_address: str | None) -> None:
        # First, before TensorFlow's import: this process's temporary directory is a scratch directory it owns,
        # swept once it is gone (ray.kill skips the exit handlers that delete autograph's files).
        scratch.own_tempdir()
        self._scratch: Scratch | None = None  # per run() / run_script(): see _task/scratch.py
        self._server = None  # ParameterServerStrategy ps/worker: TF's in-process server
        self._sock: socket.socket | None = None
        if spec is not None:
            self.adopt(spec, advertise_address)

    def warm(self) -> dict[str, Any]:
        """A standby's start: TensorFlow and tf-keras imported (raytf/_task/warm.py)."""
        from raytf._task import warm

        return {"pid": os.getpid(), "import_s": warm.import_tensorflow()}

    def adopt(self, spec: TaskSpec, advertise_address: str | None) -> None:
        """Become the task `spec`: hold its port. Called by __init__, or on a standby given a task."""
        self.spec = spec
        self._host = advertise_address or ray.util.get_node_ip_address()
        self._sock = reserve_port(spec.port_range)
        self._port = self._sock.getsockname()[1] if self._sock is not None else None
        # Every port of cluster.port_range taken: address() says so and the driver fails the run. (Raised here, it
        # would kill the actor and reach the driver as a start-up failure, which it retries.)
        self._no_port = ports.none_free(spec.port_range, self._host) if self._sock is None else None
        self._node_id = ray.get_runtime_context().get_node_id()

    def _new_scratch(self, run_dir: RunDir, attempt: int) -> str:
        """This attempt's scratch directory; first, those of this node's tasks that were killed go."""
        gone = scratch.sweep()
        if gone:
            log.info("removed %d scratch directories of tasks that are gone", len(gone))
        self._scratch = Scratch(run_dir.run_name, f"{self.spec.role}{self.spec.index}-a{attempt}")
        return self._scratch.path

    def _drop_scratch(self) -> None:
        if self._scratch is not None:
            self._scratch.remove()
            self._scratch = None

    def address(self, run_dir: RunDir | None = None, marker: str | None = None,
                code: CodeNeeds | None = None) -> dict[str, Any]:
        """Where this task listens, what it holds, whether it sees the driver's storage marker and what of the
        program (`code`) it lacks."""
        return {
            "storage_visible": run_dir.can_see(marker) if run_dir is not None and marker else None,
            "code_missing": usercode.missing(code) if code is not None else [],
            "role": self.spec.role,
            "index": self.spec.index,
            "rank": self.spec.rank,
            "host": self._host,
            "port": self._port,
            "port_error": self._no_port,
            "node_id": self._node_id,
            "pid": os.getpid(),
            "gpu_ids": [str(g) for g in ray.get_gpu_ids()],
            "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        }

    def _on_sigterm(self, notify: Callable[[], None]) -> None:
        """A preemption notice (SIGTERM) is reported to the driver, which has every task save at an agreed
        step and stop; the restart then loses nothing. Without this, Ray would exit the process at once."""
        def handler(signum, frame):
            threading.Thread(target=notify, name="raytf-preempted", daemon=True).start()

        try:
            signal.signal(signal.SIGTERM, handler)
        except ValueError:  # not the main thread (a threaded actor): keep Ray's default
            log.debug("SIGTERM handler not installed: actor runs off the main thread")

    def _release_port(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def _prepare(self, tf_config: dict | None, cfg: Config, python_path: list[str]):
        # Single-task strategies (mirrored, central_storage) run without a cluster: no TF_CONFIG at all.
        if tf_config is None:
            os.environ.pop("TF_CONFIG", None)
        else:
            os.environ["TF_CONFIG"] = json.dumps(tf_config)
        for p in reversed(usercode.task_paths(python_path)):
            if p not in sys.path:
                sys.path.insert(0, p)
        from raytf._task import tf_runtime

        tf_runtime.configure(cfg.cluster.threads or self.spec.threads, cfg.cluster.gpu_memory_growth)
        return tf_runtime

    def _error(self, e: BaseException, kind: str = "user") -> dict[str, Any]:
        kind = getattr(e, "failure_kind", kind)  # (raytf's own, e.g. ctx.dataset's for a name not given: config)
        if kind == "user" and type(e).__name__ in failure.PEER_ERRORS and type(e).__module__.startswith("tensorflow"):
            kind = "peer"  # a collective or RPC lost its peer: the symptom, not the cause
        advice = failure.hint(f"{e}")
        # Bounded as result.json keeps them: an exception's text can be anything (a tensor, a dataset's repr).
        return {"ok": False, "error": WorkerError(
            limits.clip(f"{type(e).__name__}: {e}", limits.MAX_ERROR_BYTES) + (f"\nFix: {advice}" if advice else ""),
            role=self.spec.role, rank=self.spec.rank, node_id=self._node_id,
            remote_traceback=limits.clip(traceback.format_exc(), limits.MAX_ERROR_BYTES, keep_end=True), kind=kind,
            error_type=type(e).__name__)}

    def _capture(self, run_dir: RunDir, attempt: int, emit: _Emitter, cfg: Config, stream: bool) -> None:
        """This process's output into the task's log, and what the driver shows of it through `emit`."""
        self._output = OutputCapture(run_dir, task_log(self.spec.role, self.spec.index, attempt), emit,
                                     Shown(streamed=stream, tf_logs=cfg.train.show_tf_logs))
        _task_logging()

    def _end_capture(self, ok: bool = True) -> None:
        """Before the task's last `emit.flush()`, so that its last lines are on the bus when its call returns."""
        output, self._output = getattr(self, "_output", None), None
        if output is not None:
            output.close(ok)

    def start_server(self, *, tf_config: dict, cfg: Config, bus, attempt: int, python_path: list[str],
                     run_dir: RunDir, stream: bool = False) -> dict[str, Any]:
        """ParameterServerStrategy ps/worker task: start TF's gRPC server; returns once it listens. `stream`: the
        driver shows its output (train.stream_output)."""
        spec = self.spec
        emit = _Emitter(bus, spec.role, spec.rank, attempt)
        self._capture(run_dir, attempt, emit, cfg, stream)
        try:
            tf_runtime = self._prepare(tf_config, cfg, python_path)
            self._server = tf_runtime.start_server(spec.role, spec.index)
            self._release_port()
            emit(ev.STARTED, {"replicas": 0, **tf_runtime.versions()})
            emit.flush()
            return {"ok": True}
        except BaseException as e:
            return self._error(e, kind="system")

    def serve(self, *, bus) -> dict[str, Any]:
        """Keep the server task alive until the driver says training is over. The call's result is
        how the driver learns that this task died (the ref fails with RayActorError)."""
        ray.get(bus.wait_stop.remote(None))
        self._end_capture()
        return {"ok": True}

    def run_script(
        self,
        *,
        tf_config: dict | None,
        cfg: Config,
        run_dir: RunDir,
        bus,
        attempt: int,
        resume_from,
        python_path: list[str],
        is_chief: bool,
        stream: bool,
        max_workers: int | None = None,
        datasets: dict[str, Any] | None = None,
        data_service=None,
    ) -> dict[str, Any]:
        """Script mode: run the user's program (train.script / train.module) in a child process with this
        task's TF_CONFIG; its exit code is the outcome. The port stays held until the child exits: its TF
        server binds it whenever the script creates its strategy (TF_GRPC_REUSE_PORT is inherited).
        `max_workers`: the run's cluster.num_workers when elastic training runs this attempt smaller
        ($RAYTF_MAX_WORKERS; None: this attempt's size). `datasets`: {name: ray.data.DataIterator}, this task's
        shares, which the host serves to the script's raytf.dataset (script/feed.py). `data_service`: the run's
        tf.data service (raytf.data_service; the child inherits it in its environment)."""
        from raytf._task import dataservice
        from raytf._task.script.host import ClusterNotUsed, ScriptHost, child_env

        dataservice.export(data_service)
        spec = self.spec
        emit = _Emitter(bus, spec.role, spec.rank, attempt)
        self._capture(run_dir, attempt, emit, cfg, stream)
        try:
            host = ScriptHost(cfg=cfg, spec=spec, run_dir=run_dir, emit=emit, attempt=attempt, is_chief=is_chief,
                              scratch=self._new_scratch(run_dir, attempt), log_file=self._output.file, stream=stream,
                              datasets=datasets)
            host.restore(resume_from)
            num_workers = len((tf_config or {}).get("cluster", {}).get("worker", [])) or 1
            env = child_env(base=dict(os.environ), tf_config=tf_config, spec=spec, cfg=cfg, run_uri=run_dir.uri,
                            attempt=attempt, is_chief=is_chief, num_workers=num_workers, max_workers=max_workers,
                            checkpoint_dir=host.checkpoint_dir, resume_from=resume_from,
                            python_path=usercode.task_paths(python_path),
                            log_dir=host.log_dir, launch_dir=host.launch_dir, work_dir=host.work_dir,
                            data_socket=host.data_socket, datasets=list(host.datasets))
            self._on_sigterm(lambda: emit(ev.PREEMPTED, {"step": host._position["step"]}))
            code, tail = host.run(env)
            self._end_capture(ok=code == 0)
            emit.flush()
            if code == 0:
                return {"ok": True, "stopped": False, **host._position}
            kind, error_type = failure.exit_failure(code, tail, host.raised)
            how = f"was killed by signal {-code}" if code < 0 else f"exited with code {code}"
            log_uri = run_dir.uri_of(task_log(spec.role, spec.index, attempt))
            last = "\n".join(f"  | {line}" for line in tail) or "  | (nothing on stderr)"
            advice = failure.hint("\n".join(tail))
            return {"ok": False, "error": WorkerError(
                f"the script {how}; the last lines of its stderr:\n{last}\n(all of it: {log_uri})"
                + (f"\nFix: {advice}" if advice else ""),
                role=spec.role, rank=spec.rank, node_id=self._node_id, remote_traceback="\n".join(tail),
                kind=kind, error_type=error_type)}
        except BaseException as e:
            self._end_capture(ok=False)
            emit.flush(timeout=5.0)
            return self._error(e, kind="user" if isinstance(e, (ClusterNotUsed, limits.TooManyMetrics)) else "system")
        finally:
            self._release_port()
            self._drop_scratch()
            self._end_capture()

    def run(
        self,
        *,
        tf_config: dict | None,
        cfg: Config,
        run_dir: RunDir,
        bus,
        attempt: int,
        resume_from,
        python_path: list[str],
        is_chief: bool,
        stream: bool = False,
        max_workers: int | None = None,
        datasets: dict[str, Any] | None = None,
        function: PickledFunction | None = None,
        data_service=None,
    ) -> dict[str, Any]:
        """Run the user's function: every MWMS worker, the PS chief (coordinator), or the evaluator.
        Returns an outcome dict; errors in user code come back as a WorkerError with the traceback.
        `stream`: the driver shows this rank's output (train.stream_output).
        `max_workers`: the run's cluster.num_workers when elastic training runs this attempt smaller
        (ctx.max_workers; None: this attempt's size). `datasets`: {name: ray.data.DataIterator}, this task's
        shares (ctx.dataset). `function`: the function itself, pickled (raytf.fit(train_fn=...)), in place of
        importing train.entrypoint (train.eval_entrypoint for the evaluator). `data_service`: the run's tf.data
        service (ctx.data_service)."""
        from raytf._task import dataservice

        dataservice.export(data_service)
        spec = self.spec
        emit = _Emitter(bus, spec.role, spec.rank, attempt)
        self._capture(run_dir, attempt, emit, cfg, stream)
        try:
            tf_runtime = self._prepare(tf_config, cfg, python_path)
            evaluator = spec.role == "evaluator"
            fn = (load_function(function) if function is not None
                  else import_entrypoint(cfg.train.eval_entrypoint if evaluator else cfg.train.entrypoint))
            from raytf._task.context import TrainContext, TrainingStopped

            if cfg.train.ray_train and not evaluator:
                # A Ray Train loop builds its own strategy (a process builds one collective strategy, once); its TF
                # server takes the port this task holds then, released when the call ends.
                from raytf._task import raytrain

                strategy, fn = raytrain.no_strategy_yet(), raytrain.loop(fn)
            else:
                strategy = tf_runtime.build_strategy(cfg, spec.role)
                # TF's server holds the port now (MWMS); ours can go.
                self._release_port()
            emit(ev.STARTED, {"replicas": int(strategy.num_replicas_in_sync), **tf_runtime.versions()})
            scratch_dir = self._new_scratch(run_dir, attempt)
            tf_runtime.keep_own_writes(scratch_dir)
            workdir = _WorkingDir(os.path.join(scratch_dir, "work"))
            ctx = TrainContext(
                cfg=cfg, strategy=strategy, role=spec.role, index=spec.index, rank=spec.rank,
                is_chief=is_chief, num_workers=len((tf_config or {}).get("cluster", {}).get("worker", [])) or 1,
                attempt=attempt, run_dir=run_dir, emit=emit, resume_from=None if evaluator else resume_from,
                scratch_dir=scratch_dir,
                wait_stop=lambda timeout: ray.get(bus.wait_stop.remote(timeout)), bus=bus, max_workers=max_workers,
                datasets=datasets,
            )
            if not evaluator:
                from raytf._task import timing

                ctx.split = timing.split(timing.measured(cfg))
            from raytf._task.gpu import GpuSampler

            gpus = GpuSampler.for_task(os.environ.get("CUDA_VISIBLE_DEVICES"))  # None without GPUs, silently
            if gpus is not None:
                ctx.sources.append(gpus.sample)
            self._on_sigterm(lambda: emit(ev.PREEMPTED, {"step": ctx.step}))
            stopped = False
            try:
                with workdir:
                    fn(ctx)
            except TrainingStopped:
                stopped = True
            finally:
                upload_outputs(run_dir, ctx.log_dir, task_log_dir(spec.role, spec.index, attempt), "ctx.log_dir")
                upload_outputs(run_dir, workdir.path, task_workdir(spec.role, spec.index),
                               "the training function's working directory")
            try:
                ctx.finish(completed=not stopped)  # uploads land before the task reports success
            finally:
                ctx.close()
                if gpus is not None:
                    gpus.close()
            self._end_capture()
            emit.flush()
            return {"ok": True, "stopped": stopped, "epoch": ctx.epoch, "step": ctx.step}
        except BaseException as e:  # report everything, SystemExit included, with its traceback
            self._end_capture(ok=False)
            emit.flush(timeout=5.0)
            return self._error(e)
        finally:
            self._release_port()
            self._drop_scratch()
            self._end_capture()
