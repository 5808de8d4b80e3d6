"""One call of a task's actor, the skeleton every role shares (a training function's `run`, a script's
`run_script`, a ParameterServerStrategy server's `start_server`): the events it sends, its output captured into
the task's log, its scratch directory, the port it holds, and how it ends (`TaskOutcome`). No TensorFlow."""

from __future__ import annotations

import logging
import queue
import signal
import threading
import traceback
from collections.abc import Callable
from typing import Any

import ray

from raytf._core import events as ev
from raytf._core import failure, limits, tracebacks
from raytf._core.tasks import TaskOutcome, TaskRun
from raytf._storage import task_log
from raytf._task import scratch
from raytf._task.lines import OWN_FORMAT, Shown
from raytf._task.scratch import Scratch
from raytf._task.tee import OutputCapture
from raytf.errors import WorkerError

log = logging.getLogger(__name__)


def task_logging() -> None:
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


class Emitter:
    """A task's events to the bus, in order, without waiting for each: at once while the bus keeps up, in batches
    of those that came meanwhile when it is behind (limits.EventOutbox: one push in flight); past
    limits.MAX_BATCH_EVENTS waiting, the task waits for its push to land (it slows to the bus' pace). `flush` waits
    until every event has landed on the bus."""

    def __init__(self, bus, role: str, rank: int, attempt: int) -> None:
        self.bus, self.role, self.rank, self.attempt = bus, role, rank, attempt
        self._outbox = limits.EventOutbox(
            lambda events: bus.push.options(concurrency_group=ev.PUSH_GROUP).remote(events),
            lambda refs, n, t: ray.wait(refs, num_returns=n, timeout=t),
            droppable=lambda e: e.kind in ev.COALESCED, size=lambda e: ev.payload_bytes(e.payload))
        self._lock = threading.Lock()  # the training thread, the checkpoint uploader and _Landings all send

    @property
    def dropped(self) -> int:
        """Events the bus may merge anyway, not sent while it took none for wait_s."""
        return self._outbox.dropped

    def __call__(self, kind: str, payload: dict[str, Any]) -> None:
        with self._lock:
            before = self._outbox.dropped
            watch = self._outbox.put(ev.Event(kind, self.role, self.rank, self.attempt, payload))
            self._warn(before)
        if watch is not None:
            _landings.watch(self, watch)

    def landed(self, ref) -> None:
        """A push `_landings` watched for this emitter landed: the events waiting for it go."""
        with self._lock:
            before = self._outbox.dropped
            watch = self._outbox.landed(ref)
            self._warn(before)
        if watch is not None:
            _landings.watch(self, watch)

    def _warn(self, before: int) -> None:
        if self._outbox.dropped and not before:
            log.warning("the event bus took no push of this task in %gs: %s events are dropped while it takes none",
                        self._outbox.wait_s, "/".join(sorted(ev.COALESCED)))

    def flush(self, timeout: float = 30.0) -> None:
        with self._lock:
            last, watch = self._outbox.take(timeout)
        if watch is not None:
            _landings.watch(self, watch)
        if last is not None:
            ray.wait([last], num_returns=1, timeout=timeout)


class _Landings:
    """Sends an emitter's waiting events when the push it watches lands, from a thread of its own (one per
    process, started on first use): Ray runs a ref's done-callback on its own core-worker thread, where we only
    queue the landing -- a push submitted from there could block the thread that completes pushes."""

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def watch(self, emitter: Emitter, ref) -> None:
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="raytf-event-landings", daemon=True)
                self._thread.start()
        ref.future().add_done_callback(lambda _: self._queue.put((emitter, ref)))

    def _run(self) -> None:
        while True:
            emitter, ref = self._queue.get()
            try:
                emitter.landed(ref)
            except Exception:  # this thread serves every emitter of the process: one's failure must not stop it
                log.exception("sending waiting events to the bus failed")


_landings = _Landings()


def error_of(e: BaseException, *, role: str, rank: int, node_id: str, kind: str = failure.USER) -> WorkerError:
    """An exception raised in a task as the WorkerError the driver gets (rank, role, node, bounded traceback)."""
    kind = getattr(e, "failure_kind", kind)  # (raytf's own, e.g. ctx.dataset's for a name not given: config)
    if kind == failure.USER and type(e).__name__ in failure.PEER_ERRORS \
            and type(e).__module__.startswith("tensorflow"):
        kind = failure.PEER  # a collective or RPC lost its peer: the symptom, not the cause
    advice = failure.hint(f"{e}")
    # The failure, not its data (raytf issue 54): the type, the message's first lines without a dumped tensor, the
    # user's own frames; the whole traceback (bounded as result.json keeps it) goes with it, and is in the task's log.
    told = tracebacks.summary(type(e).__name__, f"{e}", tracebacks.own_frames_of(e))
    return WorkerError(
        told + (f"\nFix: {advice}" if advice else ""),
        role=role, rank=rank, node_id=node_id,
        remote_traceback=limits.clip("".join(traceback.format_exception(type(e), e, e.__traceback__)),
                                     limits.MAX_ERROR_BYTES, keep_end=True),
        kind=kind, error_type=type(e).__name__)


class TaskCall:
    """`with TaskCall(actor, run) as call:` around a role's work; the call's result is then `call.outcome`.

    On entry: an event emitter on the attempt's bus (`call.emit`), this process's output into the task's log (what
    the driver shows of it through `emit`). The body ends with `call.succeeded(...)` or `call.failed(error)`: the
    program's last lines and events are on the bus before the call returns. Any exception (SystemExit included) is
    the outcome too, as its WorkerError, of kind `kind(e)`. Always: the port the actor held is released, the
    scratch directory goes, the capture ends; `keep_output` keeps it on a success (a server's: `serve()` ends it).
    """

    def __init__(self, actor, run: TaskRun, *, kind: Callable[[BaseException], str] = lambda e: failure.USER,
                 keep_output: bool = False) -> None:
        self.actor, self.run, self.kind, self.keep_output = actor, run, kind, keep_output
        spec = self.spec = actor.spec
        self.emit = Emitter(run.bus, spec.role, spec.rank, run.attempt)
        self.output: OutputCapture | None = None
        self.outcome: TaskOutcome | None = None
        self._scratch: Scratch | None = None

    def __enter__(self) -> TaskCall:
        spec, run = self.spec, self.run
        self.output = OutputCapture(run.run_dir, task_log(spec.role, spec.index, run.attempt), self.emit,
                                    Shown(streamed=run.stream, tf_logs=run.cfg.train.show_tf_logs))
        task_logging()
        return self

    def scratch(self) -> str:
        """This call's scratch directory (made on the first call); first, those of this node's tasks that were
        killed go (see _task/scratch.py)."""
        if self._scratch is None:
            gone = scratch.sweep()
            if gone:
                log.info("removed %d scratch directories of tasks that are gone", len(gone))
            self._scratch = Scratch(self.run.run_dir.run_name, f"{self.spec.role}{self.spec.index}-a{self.run.attempt}")
        return self._scratch.path

    def on_sigterm(self, notify: Callable[[], None]) -> None:
        """A preemption notice (SIGTERM) is reported to the driver (`notify`), which has every task save at an
        agreed step and stop; the restart then loses nothing. Without this, Ray would exit the process at once."""
        def handler(signum, frame):
            threading.Thread(target=notify, name="raytf-preempted", daemon=True).start()

        try:
            signal.signal(signal.SIGTERM, handler)
        except ValueError:  # not the main thread (a threaded actor): keep Ray's default
            log.debug("SIGTERM handler not installed: actor runs off the main thread")

    def end_output(self, ok: bool = True, log_only: str = "") -> None:
        """Before the call's last `emit.flush()`, so that its last lines are on the bus when it returns (`log_only`:
        OutputCapture.close's)."""
        output, self.output = self.output, None
        if output is not None:
            output.close(ok, log_only)

    def succeeded(self, *, stopped: bool = False, epoch: int | None = None, step: int | None = None) -> TaskOutcome:
        if not self.keep_output:
            self.end_output()
        self.emit.flush()
        self.outcome = TaskOutcome(stopped=stopped, epoch=epoch, step=step)
        return self.outcome

    def failed(self, error: WorkerError) -> TaskOutcome:
        self.end_output(ok=False)
        self.emit.flush()
        self.outcome = TaskOutcome(error=error)
        return self.outcome

    def __exit__(self, typ, e, tb) -> bool:
        try:
            if e is not None:  # report everything, SystemExit included, with its traceback
                # The whole traceback into the task's log, which the driver's brief of it names for the rest
                # (tracebacks.message_lines; raytf issue 71: the log did not hold it, result.json alone did).
                self.end_output(ok=False, log_only="".join(traceback.format_exception(typ, e, tb)))
                self.emit.flush(timeout=5.0)
                self.outcome = TaskOutcome(error=error_of(e, role=self.spec.role, rank=self.spec.rank,
                                                          node_id=self.actor.node_id, kind=self.kind(e)))
        finally:
            self.actor.release_port()
            if self._scratch is not None:
                self._scratch.remove()
                self._scratch = None
            if not self.keep_output or self.outcome is None or not self.outcome.ok:
                self.end_output()
        return True
