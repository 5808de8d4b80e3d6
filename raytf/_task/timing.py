"""Where the task's step time goes, measured inside TensorFlow: time blocked in the input iterator's get_next and,
under MultiWorkerMirroredStrategy, in the all-reduce. Runs in the task's process (or a script's child) only.

A Keras `fit` (and a custom loop's `tf.function` that calls `next(iterator)` inside it) fetches its batch inside
the traced graph, where Python cannot time it. So the fetch itself is instrumented, once per process: the methods
every `next(iterator)` goes through (tf.data's OwnedIterator, tf.distribute's DistributedIterator) are wrapped, and
a wrapped call adds its wall time to a per-process total:
  - eagerly (a custom loop calling `next(it)` in Python): measured around the call;
  - while a tf.function is traced: the traced graph gets `t0 = timestamp()` before the get_next (by a control
    edge), `t1 = timestamp()` after its outputs exist, and `total += t1 - t0` on a CPU variable, so every run of
    the graph adds its own wait. The same for each dense all-reduce of a collective (tf.distribute's
    CollectiveReplicaLauncher.all_reduce, which batch_all_reduce calls per pack): t0 once this rank's input to it
    exists, t1 once the reduced tensor does, which is the wait for slower peers plus the transfer.
The totals are read when a step row is due (the read waits for the device: the same moment the row's metrics are
read). Not instrumented, and so absent from the rows rather than guessed: ParameterServerStrategy (its steps run on
remote workers); all-reduces inside an XLA-compiled function (XLA cannot compile TF's timestamp op); sparse
all-gathers. On GPUs the times are when TF's executor saw the ops done, close to but not exactly the kernels'.
The three methods wrapped, and the two other private symbols used, are in raytf/_core/private_apis.py (BREAKDOWN):
when one is missing or changed in the installed TensorFlow, the breakdown is off in that process with one warning
and the rows carry step_time_s only; a traced call of ours that fails later turns it off the same way (the program's
own call always runs, untimed). Never a failed run for an optional metric.
"""

from __future__ import annotations

import functools
import logging
import threading
import time

from raytf._core import private_apis as apis
from raytf._core.breakdown import COLLECTIVE, INPUT_WAIT, SAVE

log = logging.getLogger(__name__)

_lock = threading.Lock()
_installed = False
_nested = threading.local()  # a wrapped get_next that calls another (DistributedIterator -> its workers') counts once


class _Total:
    """Seconds spent in one kind of wait, from eager calls (a float) and from traced graphs (a CPU variable that
    each run of the graph adds to). `used` once any call went through it: a part nothing measured is left out of
    the rows (a custom loop that feeds tensors has no get_next to wait in)."""

    def __init__(self) -> None:
        self.eager = 0.0
        self.used = False
        self._var = None

    def variable(self):
        """The graph-side total, made once (outside any function being traced and outside the strategy's scope: a
        plain local variable, not a mirrored one, as TF's CollectiveReplicaLauncher makes its ordering token)."""
        if self._var is None:
            import tensorflow as tf

            resource_variable = apis.lookup(apis.RESOURCE_VARIABLE)
            with tf.init_scope(), tf.device("CPU:0"):
                # The class itself, not tf.Variable: tf.Variable(...) goes through the strategy's variable
                # creators (tensorflow/python/ops/variables.py, VariableMetaclass) and would be mirrored.
                self._var = resource_variable(0.0, dtype=tf.float64, trainable=False, name="raytf_timing")
        return self._var

    def seconds(self) -> float:
        graph = float(self._var.numpy()) if self._var is not None else 0.0
        return self.eager + graph


INPUT = _Total()
ALL_REDUCE = _Total()
SAVES = _Total()  # ctx.save and a script's checkpoint sync: Python-timed (add_save)


def _timed_graph(total: _Total, call, inputs=(), api: apis.PrivateApi | None = None):
    """Trace `call()` between two timestamps; the graph adds t1 - t0 to `total` each time it runs. Should our part
    fail (a TF that changed under it), the call is traced untimed and the breakdown is off (one warning)."""
    import tensorflow as tf

    try:
        var = total.variable()
        with tf.control_dependencies(tf.nest.flatten(inputs, expand_composites=True)):
            t0 = tf.timestamp()
    except Exception as e:
        _off(api, e)
        return call()
    with tf.control_dependencies([t0]):
        out = call()  # the program's own: its errors are its own
    try:
        flat = [t for t in tf.nest.flatten(out, expand_composites=True) if isinstance(t, (tf.Tensor, tf.Operation))]
        with tf.control_dependencies(flat):
            t1 = tf.timestamp()
        added = var.assign_add(t1 - t0)
        # What uses the outputs waits for t1: else the executor may run that work first (with one inter-op thread it
        # did) and t1 - t0 would count it too.
        with tf.control_dependencies([t1, added]):
            return tf.nest.map_structure(_after, out, expand_composites=True)
    except Exception as e:
        _off(api, e)
        return out


def _off(api: apis.PrivateApi | None, e: Exception) -> None:
    apis.SWITCHES.turn_off(api or apis.OWNED_NEXT, f"changed: a traced call failed ({type(e).__name__}: {e})",
                           log.warning)


def _after(t):
    import tensorflow as tf

    return tf.identity(t) if isinstance(t, tf.Tensor) else t


def _wrap(total: _Total, original, *, in_graph_ok, api: apis.PrivateApi):
    @functools.wraps(original)
    def wrapped(*args, **kwargs):
        if getattr(_nested, "depth", 0) or apis.SWITCHES.is_off(apis.BREAKDOWN):
            return original(*args, **kwargs)
        import tensorflow as tf

        _nested.depth = 1
        try:
            if tf.executing_eagerly():
                t = time.perf_counter()
                try:
                    return original(*args, **kwargs)
                finally:
                    total.eager += time.perf_counter() - t
                    total.used = True
            if not in_graph_ok(args):
                return original(*args, **kwargs)
            total.used = True
            # CollectiveReplicaLauncher.all_reduce(self, input_tensor, ...): its clock starts once the input exists.
            inputs = (args[1] if len(args) > 1 else kwargs.get("input_tensor")) if total is ALL_REDUCE else ()
            return _timed_graph(total, lambda: original(*args, **kwargs), inputs=inputs, api=api)
        finally:
            _nested.depth = 0

    wrapped.__raytf_timed__ = True
    return wrapped


def _graph_ok(args) -> bool:
    import tensorflow as tf

    # XLA cannot compile the timestamp op (jit_compile=True models): leave those graphs as they are.
    if apis.lookup(apis.XLA_CONTEXT)(tf.compat.v1.get_default_graph()):
        return False
    # A ParameterServerStrategy's functions run on its workers, where this process's total cannot be: a process
    # that was instrumented for another strategy leaves them as they are.
    strategy = tf.distribute.get_strategy() if tf.distribute.has_strategy() else None
    return strategy is None or "ParameterServer" not in type(strategy).__name__


def install() -> bool:
    """Wrap the iterators' get_next and the collectives' all-reduce in this process (idempotent). Call after
    TensorFlow is imported and before the program traces its step; never under ParameterServerStrategy. False (the
    breakdown off, one warning) when a symbol it needs is missing or changed in this TensorFlow."""
    global _installed
    with _lock:
        if _installed:
            return not apis.SWITCHES.is_off(apis.BREAKDOWN)
        if not apis.available(apis.BREAKDOWN, log.warning):
            return False
        for api, total in ((apis.OWNED_NEXT, INPUT), (apis.DISTRIBUTED_NEXT, INPUT), (apis.ALL_REDUCE, ALL_REDUCE)):
            cls, name = apis.owner(api)
            original = getattr(cls, name)
            if not getattr(original, "__raytf_timed__", False):
                setattr(cls, name, _wrap(total, original, in_graph_ok=_graph_ok, api=api))
        _installed = True
        return True


def measured(cfg) -> bool:
    """Whether a run's steps are timed in its tasks' processes: not under ParameterServerStrategy (its steps run on
    its workers, where the coordinator's process cannot time them), nor with metrics.breakdown=false."""
    from raytf.config import Strategy

    return cfg.cluster.strategy is not Strategy.parameter_server and cfg.metrics.breakdown


def split(measure: bool):
    """The breakdown of this process's step rows (a StepCounter's `split`), the instrumentation installed first
    when `measure`; else the rows carry step time only."""
    from raytf._core.breakdown import Split

    if not measure or not install():
        return Split(dict)
    return Split(totals)


def add_save(seconds: float) -> None:
    SAVES.eager += seconds
    SAVES.used = True


def totals() -> dict[str, float]:
    """Seconds so far in each measured part (breakdown.Split takes the differences between rows)."""
    out = {}
    if apis.SWITCHES.is_off(apis.BREAKDOWN):
        return out
    for name, total in ((INPUT_WAIT, INPUT), (COLLECTIVE, ALL_REDUCE), (SAVE, SAVES)):
        if total.used:
            out[name] = total.seconds()
    return out
