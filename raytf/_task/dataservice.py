"""The tf.data service on Ray, the task side without Ray: what `ctx.data_service(ds)` / `raytf.data_service(ds)` do
in a training task's process (or a script's child): the user's pipeline, checked, read through the run's service;
and the dispatcher's journal on its node, which a restarted dispatcher adopts. (Its servers, Ray actors:
_task/dataserver.py.)

Neither Ray nor TensorFlow is imported at module level: a script's child imports this module for
`raytf.data_service`, and the driver for the journal sweep it runs on the dispatcher's node; `data_service` imports
TensorFlow in its own process.
"""

from __future__ import annotations

import logging
import os
import threading

from raytf._core import dataservice as rules
from raytf._core import events as ev
from raytf._core.dataservice import SERVICE_ENV, Service, Unservable
from raytf._task import report as reporting
from raytf._task import scratch

log = logging.getLogger(__name__)

# -- the training task's side --------------------------------------------------------------------------------------
JOURNAL_ROOT_NAME = "raytf-dataservice"


def journal_root() -> str:
    """Where dispatchers keep their journals on a node: beside the tasks' scratch root (in the node's temporary
    directory, not a task process's own), apart from it: every task that starts sweeps the scratch root, and a
    journal must outlive its dispatcher's process until the restart adopts it."""
    return os.path.join(os.path.dirname(scratch.root()), JOURNAL_ROOT_NAME)


def open_journal(run_name: str, attempt: int) -> scratch.Scratch:
    """The dispatcher's journal for this attempt on this node: its predecessor's, whose process died (a restart in
    the same bundle, so on the same node, adopts it and goes on where it was), else a new one."""
    label = f"dispatcher-a{attempt}"
    parent = os.path.join(journal_root(), run_name)
    try:
        names = sorted(os.listdir(parent))
    except FileNotFoundError:
        names = []
    for name in names:
        if name.startswith(f"{label}-"):
            try:
                return scratch.Scratch.adopt(os.path.join(parent, name))
            except OSError:  # its owner lives (or a sweep took it): not ours
                continue
    return scratch.Scratch(run_name, label, base=journal_root())


def sweep_journals(pids: tuple[int, ...] = (), timeout_s: float = 5.0) -> list[str]:
    """The journals on this node whose dispatcher is gone, once the dispatchers `pids` (on this node) are: run by the
    driver on the dispatcher's node after the attempt's servers were killed (ray.kill skips their `finally`); Ray
    may report an actor dead a moment before its process has exited and dropped its lock."""
    scratch.wait_gone(pids, timeout_s)
    removed = scratch.sweep(journal_root())
    try:
        os.rmdir(journal_root())  # only when empty: no empty directory stays on the node (a Scratch being made retries)
    except OSError:
        pass
    return removed


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
    distributed iterator agrees every step on whether any worker still has data (docs/data.md). Each element of
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
