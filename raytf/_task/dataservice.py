"""The tf.data service on Ray, the task side: the server actor (a dispatcher or a worker, TF's DispatchServer and
WorkerServer on a port it held first), and what `ctx.data_service(ds)` / `raytf.data_service(ds)` do in a training
task's process (or a script's child): the user's pipeline, checked, read through the run's service.

Neither Ray nor TensorFlow is imported at module level: the driver imports this module for the actor's class, and a
script's child for `raytf.data_service`; the actor's methods and `data_service` import them in their own process.
"""

from __future__ import annotations

import logging
import os
import socket
import tempfile
import threading
import time
from typing import TYPE_CHECKING, Any

from raytf._core import dataservice as rules
from raytf._core import events as ev
from raytf._core import tf_ports
from raytf._core.dataservice import DISPATCHER, SERVICE_ENV, Service, Unservable
from raytf._task import report as reporting
from raytf._task import scratch

if TYPE_CHECKING:
    from raytf._storage import RunDir

log = logging.getLogger(__name__)

JOURNAL_ROOT_NAME = "raytf-dataservice"


def journal_root() -> str:
    """Where dispatchers keep their journals on a node: apart from the tasks' scratch root, which every task that
    starts sweeps (a journal must outlive its dispatcher's process until the restart adopts it)."""
    return os.path.join(tempfile.gettempdir(), JOURNAL_ROOT_NAME)


def sweep_journals(journal: str | None = None, timeout_s: float = 5.0) -> list[str]:
    """The journals on this node whose dispatcher is gone (run by the driver on the dispatcher's node after the
    attempt's servers were killed: ray.kill skips their `finally`). `journal`, the attempt's, is waited for up to
    `timeout_s`: Ray may report the actor dead a moment before its process has exited (and dropped its lock)."""
    deadline = time.monotonic() + timeout_s
    removed = scratch.sweep(journal_root())
    while journal and os.path.isdir(journal) and time.monotonic() < deadline:
        time.sleep(0.05)  # the lock goes with the process, at its exit: nothing to wait on but the lock itself
        removed += scratch.sweep(journal_root())
    try:
        os.rmdir(journal_root())  # only when empty: no empty directory stays on the node (a Scratch being made retries)
    except OSError:
        pass
    return removed


def service_log(role: str, index: int, attempt: int) -> str:
    """A server's captured output in the run directory (a restart appends to its slot's)."""
    return f"logs/data_service-{role}{index}-attempt{attempt}.log"


class DataServiceServer:
    """One tf.data service server in an actor of its own. Lifecycle: __init__ (hold the port, as a task does:
    tensorflow#21492) -> address() -> start(...) (TF's server binds the held port with TF_GRPC_REUSE_PORT; ours is
    released) -> serve(), which returns only when the actor is stopped: its ref failing is how the driver learns the
    server died. A threaded actor (serve blocks while the driver's other calls are answered)."""

    def __init__(self, role: str, index: int, port_range: tuple[int, int] | None, advertise: str | None,
                 port: int | None = None) -> None:
        import ray

        from raytf._task.actor import reserve_port

        self.role, self.index = role, index
        self._host = advertise or ray.util.get_node_ip_address()
        # A restarted server takes its old port: the trainers and the workers know the dispatcher by its address, and
        # the dispatcher keeps a worker's tasks by its address.
        wanted = (port, port) if port else (tuple(port_range) if port_range else None)
        self._sock = _hold(port) if port else reserve_port(wanted)
        self._port = self._sock.getsockname()[1] if self._sock is not None else None
        self._no_port = None
        if self._sock is None:
            self._no_port = (f"tf.data service {role} {index}: its port {port} on {self._host} was taken by another "
                             "process, so it cannot start again at its address" if port else
                             tf_ports.none_free(wanted, self._host))
        self._node_id = ray.get_runtime_context().get_node_id()
        self._server = None
        self._journal: scratch.Scratch | None = None
        self._output = None
        self._stopped = threading.Event()

    def __repr__(self) -> str:  # what Ray's state API and logs call the actor (its `repr_name`)
        return f"DataServiceServer({self.role} {self.index})"

    def address(self) -> dict[str, Any]:
        return {"role": self.role, "index": self.index, "host": self._host, "port": self._port,
                "port_error": self._no_port, "node_id": self._node_id, "pid": os.getpid()}

    def start(self, *, run_dir: RunDir, run_name: str, attempt: int, threads: int, dispatcher: str | None = None,
              journal: str | None = None) -> dict[str, Any]:
        """Start TF's server on the held port: the dispatcher journals to a directory on this node (`journal`: its
        predecessor's, when restarting), a worker registers with `dispatcher` (host:port) under the address the
        others reach it at. Returns {"ok": True, "journal": ...} or {"ok": False, "error": one line}."""
        if self._no_port:
            return {"ok": False, "error": self._no_port, "config": True, "address": self.address()}
        from raytf._task.lines import Shown
        from raytf._task.tee import OutputCapture

        # TF's own lines (its servers' configs, their start and stop) into the run's logs/, not the driver's
        # terminal (Ray's log_to_driver would print them there).
        self._output = OutputCapture(run_dir, service_log(self.role, self.index, attempt), lambda kind, p: None,
                                     Shown(streamed=False))
        try:
            from raytf._task import tf_runtime

            tf_runtime.configure(threads, False)
            import tensorflow as tf

            svc = tf.data.experimental.service
            if self.role == DISPATCHER:
                self._journal = (scratch.Scratch.adopt(journal) if journal else
                                 scratch.Scratch(run_name, f"dispatcher-a{attempt}", base=journal_root()))
                # fault_tolerant_mode: every change of its state (datasets, jobs, the split cursor) is in the journal
                # before it answers, so a dispatcher started again from it goes on where it was.
                self._server = svc.DispatchServer(svc.DispatcherConfig(
                    port=self._port, work_dir=os.path.join(self._journal.path, "journal"), fault_tolerant_mode=True))
            else:
                here = f"{self._host}:{self._port}"
                self._server = svc.WorkerServer(svc.WorkerConfig(
                    dispatcher_address=dispatcher, worker_address=here, port=self._port,
                    # TF's default names "localhost", which only this host could reach.
                    data_transfer_address=f"{self._host}:%dts_port%"))
            self._release_port()
            return {"ok": True, "journal": self._journal.path if self._journal is not None else None,
                    "address": self.address()}
        except Exception as e:
            log.exception("tf.data service %s %d did not start", self.role, self.index)
            text = str(e).strip().splitlines()
            return {"ok": False, "error": f"{type(e).__name__}: {text[0] if text else ''}", "address": self.address()}

    def serve(self) -> bool:
        """Returns when `stop` is called; fails (with the actor) when the server's process dies."""
        self._stopped.wait()
        return True

    def stop(self) -> None:
        """A graceful end (the driver kills the actor right after, whatever this did)."""
        try:
            if self._server is not None:
                self._server.stop()
            if self._journal is not None:
                self._journal.remove()
            if self._output is not None:
                self._output.close()
        finally:
            self._stopped.set()

    def _release_port(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None


def _hold(port: int) -> socket.socket | None:
    """Hold `port` again for a restarted server, as reserve_port holds one (bound, then SO_REUSEPORT for TF's
    server), with SO_REUSEADDR: its predecessor's connections linger in TIME_WAIT on it for a minute after its death,
    which would refuse a plain bind. (Still refused while another socket listens on it, or holds it without
    SO_REUSEADDR, as every task's reserve_port does.) None when it is taken."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(("", port))
    except OSError:
        sock.close()
        return None
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    return sock


# -- the training task's side --------------------------------------------------------------------------------------
def export(service: Service | None) -> None:
    """Make the run's service known to this task's process (and to a script's child, which inherits the
    environment); None: none (a process may run more than one call)."""
    if service is None:
        os.environ.pop(SERVICE_ENV, None)
    else:
        os.environ[SERVICE_ENV] = service.to_json()


_calls: dict[tuple[str, int], int] = {}  # (run, attempt) -> data_service calls so far in this process
_lock = threading.Lock()


def data_service(ds):
    """`ds` read through the run's tf.data service: the pipeline before this call runs in the service's workers (CPU
    actors anywhere in the cluster, data_service.*), whatever follows it (prefetch, the strategy's distribution)
    runs here. Without a service (data_service.workers=0, or a script run outside raytf) `ds` is returned as it is,
    so the same program runs both ways.

    In distributed_epoch mode (the default) the trainers share one job: every element goes to one of them, once an
    epoch, each taking the next batch as it asks (their counts differ). Under MultiWorkerMirroredStrategy, Keras
    `fit` and a custom loop over `strategy.experimental_distribute_dataset(ds)` end each epoch together: TF's
    distributed iterator agrees every step on whether any worker still has data (see the README). Each element of
    `ds` is the global batch, as without the service.

    Raises:
        Unservable: the pipeline runs Python code (from_generator, py_function, numpy_function), which the service
            cannot run (TF's limit): a configuration error, never retried.
        TypeError: `ds` is not a tf.data.Dataset.
    """
    return distribute(ds, reporting._sink)


def distribute(ds, sink):
    """data_service(ds) for the process whose reporting sink (a TrainContext, a script's ScriptReporter; None outside
    raytf) is `sink`: it names the job (its epoch, the evaluator's role) and hears that the service is used."""
    text = os.environ.get(SERVICE_ENV)
    if not text:
        return ds
    service = Service.from_json(text)
    import tensorflow as tf

    if not isinstance(ds, tf.data.Dataset):
        raise TypeError(rules.not_a_dataset(ds))
    # (A ParameterServerStrategy per-worker dataset function is traced, on the coordinator: its graph is not at hand
    # to look into, nor its cardinality; TF says what it cannot serve when a worker registers the dataset.)
    eager = tf.executing_eagerly()
    if eager and (problem := rules.unservable(_ops(ds))):
        raise Unservable(problem)
    role = getattr(sink, "role", None) or os.environ.get("RAYTF_ROLE", "worker")
    with _lock:
        key = (service.run, service.attempt)
        call = _calls.get(key, 0)
        _calls[key] = call + 1
    job = rules.job_name(service, group="eval" if role == "evaluator" else "train",
                         epoch=int(getattr(sink, "epoch", 0) or 0), call=call)
    steps = getattr(getattr(getattr(sink, "cfg", None), "train", None), "steps_per_epoch", None)
    if steps is not None and eager and int(ds.cardinality()) >= 0:
        log.warning("%s", rules.steps_warning(steps))
    workers = int(getattr(sink, "num_workers", 0) or os.environ.get("RAYTF_NUM_WORKERS", "1"))
    if role == "worker" and workers > 1 and (partial := rules.unknown_dims(_dense_shapes(tf, ds.element_spec))):
        log.warning("%s", partial)
    emit = getattr(sink, "_emit", None)
    if emit is not None:  # the driver learns the service is used (or warns at the end that it served nothing)
        emit(ev.DATA_SERVICE, ev.ServiceUsed(job=job))
    return ds.apply(tf.data.experimental.service.distribute(
        processing_mode=service.processing_mode, service=service.target, job_name=job))


def _dense_shapes(tf, spec) -> list[tuple[str, tuple[int | None, ...]]]:
    """(where, shape) of each dense tensor of an element spec: "the element", "element 0", "element 1/image"."""
    from tensorflow.python.util import nest

    out = []
    for path, s in nest.flatten_with_joined_string_paths(spec):
        if isinstance(s, tf.TensorSpec) and s.shape.rank is not None:
            out.append((f"element {path}" if path else "the element", tuple(s.shape.as_list())))
    return out


def _ops(ds) -> set[str]:
    """The op types of the pipeline's graph and of every function in it (map functions, a generator's)."""
    import tensorflow as tf
    from tensorflow.core.framework import graph_pb2

    graph = graph_pb2.GraphDef()
    # IGNORE: a pipeline with state outside the graph (a stateful random op, a lookup table) still serializes here;
    # the service says what it cannot run of that, when it registers the dataset.
    graph.ParseFromString(ds._as_serialized_graph(
        external_state_policy=tf.data.experimental.ExternalStatePolicy.IGNORE).numpy())
    ops = {n.op for n in graph.node}
    for f in graph.library.function:
        ops |= {n.op for n in f.node_def}
    return ops
