"""Keras 3 in a task process (raytf issue 72; _core/keras3.py says what fails upstream and why). The program's own
`import keras` is watched (a finder on `sys.meta_path`, removed once it fires), and the Keras 3 it imports gets, in
this process only:

- `Model.fit` wrapped (`evaluate` and `predict` too: they reach the same trainer code): under
  ParameterServerStrategy, or with steps_per_execution > 1, or where Keras's trainer is not the one the correction
  knows, it raises `Keras3Unsupported` (a configuration error, never retried) before any
  step, in one line; under MultiWorkerMirroredStrategy with two or more workers it corrects the trainer first
  (once), has a worker that is not the chief write its own ModelCheckpoint/BackupAndRestore saves where they cannot
  collide with the chief's (_task/keras3_writes.py), warns once about BatchNormalization that does not
  synchronize, and adds the script's callback (script mode) as tf-keras's fit has it;
- the trainer's two lines corrected (`correct_trainer`): its `_maybe_symbolic_build` takes a local replica's batch
  for the shapes, and `reduce_per_replica` reduces step logs with axis=None. Both stand-ins call Keras's own code
  for anything but MWMS of several workers, so a strategy of one worker trains as Keras wrote it.

Every Keras symbol used is in the private-API table (_core/private_api_keras3.py): missing or changed, the fit
is refused in the one line of before (`Keras3Unsupported`). Keras itself is never imported here: a program that
does not use it pays nothing."""

from __future__ import annotations

import contextlib
import importlib.abc
import importlib.util
import inspect
import logging
import os
import sys
from collections.abc import Callable, Iterator

from raytf._core import failure, keras3
from raytf._core import private_apis as apis

log = logging.getLogger(__name__)


class Keras3Unsupported(ValueError):
    """Keras 3's Model.fit where it cannot train (ParameterServerStrategy, steps_per_execution > 1, a trainer the
    correction does not know): a configuration error, never retried."""

    failure_kind = failure.CONFIG


# Script mode's hook: a callable that adds raytf's callback to a fit's callbacks (a list, or Keras's CallbackList).
_add_callback: Callable[[object], object] | None = None


def install(add_callback: Callable[[object], object] | None = None) -> None:
    """Watch for the program's `import keras` (idempotent); a Keras 3 already imported is wrapped now.
    `add_callback(callbacks)`: script mode's, called on every Keras 3 fit's callbacks (returns them)."""
    global _add_callback
    if add_callback is not None:
        _add_callback = add_callback
    if "keras" in sys.modules:
        _wrap_fit(sys.modules["keras"])
    elif not any(isinstance(f, _Watch) for f in sys.meta_path):
        sys.meta_path.insert(0, _Watch())


@contextlib.contextmanager
def callbacks_added(add_callback: Callable[[object], object]) -> Iterator[None]:
    """While the block runs, every Keras 3 fit's callbacks go through `add_callback` (raytf.compat's Ray Train
    loop: its steps counted, as tf-keras's fits' are: _task/raytrain_keras.py)."""
    global _add_callback
    install()
    kept, _add_callback = _add_callback, add_callback
    try:
        yield
    finally:
        _add_callback = kept


class _Watch(importlib.abc.MetaPathFinder):
    """Finds nothing itself: when `keras` is looked up, it asks the other finders for it and gives their spec a
    loader that wraps the module once it has run. Removed when that happens, not at the lookup: TensorFlow's own
    import probes for Keras (importlib.util.find_spec) without loading it."""

    _looking = False

    def find_spec(self, fullname, path=None, target=None):
        if fullname != "keras" or self._looking:
            return None
        self._looking = True  # (the lookup below must not find this finder again)
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            self._looking = False
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        spec.loader = _Wrapping(spec.loader, self)
        return spec


class _Wrapping(importlib.abc.Loader):
    """The Keras spec's loader, which runs the module, then wraps its Model.fit."""

    def __init__(self, loader, watch: _Watch) -> None:
        self._loader, self._watch = loader, watch

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module) -> None:
        if self._watch in sys.meta_path:
            sys.meta_path.remove(self._watch)
        self._loader.exec_module(module)
        _wrap_fit(module)

    def __getattr__(self, name):  # (what else a loader offers: get_resource_reader, is_package, ...)
        return getattr(self._loader, name)


def _wrap_fit(keras) -> None:
    """Keras 3's fit, evaluate and predict, checked (and the trainer corrected) before their first step; fit's
    callbacks through script mode's or raytf.compat's hook."""
    version = str(getattr(keras, "__version__", ""))
    model = getattr(keras, "Model", None)
    if not version.startswith("3") or model is None or getattr(model.fit, "_raytf_keras3", False):
        return
    for method in ("fit", "evaluate", "predict"):
        setattr(model, method, _wrapped(keras, version, getattr(model, method), method))


def _wrapped(keras, version: str, original, method: str):
    signature = inspect.signature(original)

    def call(self, *args, **kwargs):
        strategy = self.distribute_strategy if _tensorflow_backend(keras) else None
        if strategy is not None:
            _check(self, strategy, version, method)
        if method == "fit" and _add_callback is not None:
            bound = signature.bind(self, *args, **kwargs)
            bound.arguments["callbacks"] = _add_callback(bound.arguments.get("callbacks"))
            args, kwargs = bound.args[1:], bound.kwargs
        return original(self, *args, **kwargs)

    call._raytf_keras3 = True
    call.__doc__, call.__name__, call.__qualname__ = original.__doc__, original.__name__, original.__qualname__
    call.__wrapped__ = original
    return call


def _tensorflow_backend(keras) -> bool:
    try:
        return keras.backend.backend() == "tensorflow"
    except Exception:  # (a Keras without keras.backend.backend(): not one raytf changes)
        return False


def _check(model, strategy, version: str, method: str = "fit") -> None:
    """Before the first step of Model.<method>: refuse what cannot run (one line), correct what can."""
    import tensorflow as tf

    if isinstance(strategy, tf.distribute.experimental.ParameterServerStrategy):
        raise Keras3Unsupported(keras3.parameter_server_refusal(version, tf_keras_version(), method))
    steps = getattr(model, "steps_per_execution", 1)
    if not isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
        return  # (one process's strategies: Keras's own code, unchanged; raytf's other checks see the cluster)
    if steps != 1:
        raise Keras3Unsupported(keras3.steps_per_execution_refusal(version, steps))
    if keras3.cluster_tasks(os.environ.get("TF_CONFIG")) < 2:
        return  # (MWMS of one worker: Keras's own code trains it)
    correct_trainer(version)
    if method != "fit":
        return
    from raytf._task import keras3_writes  # (it names this module's error)

    keras3_writes.keep_writes_apart()
    if keras3_writes.chief_and_index()[0]:  # (said once, by the chief: its model is the one committed)
        _warn_batch_norm(model)


_corrected: keras3.Trainer | None = None


def correct_trainer(version: str) -> keras3.Trainer:
    """Keras's TensorFlow trainer corrected for MWMS of several workers (once a process), after checking its source
    has the two lines corrected (an upstream fix: nothing done). Raises Keras3Unsupported where a name moved or the
    lines are not the ones known."""
    global _corrected
    if _corrected is not None:
        return _corrected
    require(apis.KERAS3_MWMS, keras3.unknown_trainer_refusal)
    trainer, _ = apis.owner(apis.KERAS3_REDUCE_PER_REPLICA)
    cls, _ = apis.owner(apis.KERAS3_SYMBOLIC_BUILD)
    found = keras3.recognise(_source(cls._maybe_symbolic_build), _source(trainer.reduce_per_replica))
    if found is keras3.Trainer.UNKNOWN:
        raise Keras3Unsupported(keras3.unknown_trainer_refusal(
            version, "its _maybe_symbolic_build and reduce_per_replica are not the ones corrected",
            tf_keras_version()))
    if found is keras3.Trainer.CORRECTABLE:
        _correct(cls, trainer)
    _corrected = found
    return found


def require(feature, refusal: Callable[[str, str, str | None], str]) -> None:
    """Raise Keras3Unsupported, `refusal(keras version, what is wrong, tf-keras version)`, when a symbol of the
    private-API table's `feature` is missing or changed in this Keras: before the first step, never mid-run."""
    for api in apis.by_feature(feature):
        why = apis.problem(api)
        if why is not None:
            keras = sys.modules.get("keras")
            raise Keras3Unsupported(refusal(str(getattr(keras, "__version__", "?")), f"{api.dotted} {why}",
                                            tf_keras_version()))


def _source(fn) -> str | None:
    try:
        return inspect.getsource(inspect.unwrap(fn))
    except (OSError, TypeError):
        return None


def _correct(cls, trainer) -> None:
    import tensorflow as tf

    multi_worker = trainer._collective_all_reduce_multi_worker
    maybe_symbolic_build, reduce_per_replica = cls._maybe_symbolic_build, trainer.reduce_per_replica
    tree = trainer.tree

    def _maybe_symbolic_build(self, iterator=None, data_batch=None):
        strategy = self._distribute_strategy
        if strategy is None or iterator is None or not multi_worker(strategy):
            return maybe_symbolic_build(self, iterator=iterator, data_batch=data_batch)
        for _, _, it in iterator:
            batch = next(it)
            data_batch = tree.map_structure(lambda v: strategy.experimental_local_results(v)[0]
                                            if isinstance(v, tf.distribute.DistributedValues) else v, batch)
            break
        with strategy.scope():
            self._symbolic_build(data_batch=data_batch)

    def _reduce_per_replica(values, strategy, reduction):
        if reduction in ("auto", "mean") and multi_worker(strategy):
            # The element-wise mean across replicas, as Keras's MirroredStrategy branch computes it; axis=0 fails
            # on the scalar step logs ("Invalid reduction dimension 0": tensorflow/tensorflow#72388).
            return tree.map_structure(lambda v: strategy.reduce("MEAN", v, axis=None), values)
        return reduce_per_replica(values, strategy, reduction)

    _maybe_symbolic_build.__wrapped__ = maybe_symbolic_build
    _reduce_per_replica.__wrapped__ = reduce_per_replica
    cls._maybe_symbolic_build = _maybe_symbolic_build
    trainer.reduce_per_replica = _reduce_per_replica  # (a module global: looked up at each call by the trainer)


_skip_next = 0  # steps of the next training epoch a mid-epoch resume has trained already
_skipping: bool = False


def resume_mid_epoch(done: int) -> None:
    """The next training epoch of this process's Keras 3 fit starts at its step `done` (a checkpoint taken within
    an epoch: a preemption's save, checkpoint.every_steps): Keras 3's fit always starts an epoch at its first step,
    and would train the saved steps twice (its own BackupAndRestore resumes at epochs only). Called by raytf's
    callback in on_train_begin, after the fit's symbolic build has peeked at its data and before its first epoch
    begins: the first epoch enumerated after that skips its first `done` steps without taking their batches, so
    the optimizer's iterations end where an uninterrupted run's do. Raises PrivateApiMissing (before any step) if
    Keras's epoch iterator moved."""
    global _skip_next, _skipping
    apis.require(apis.KERAS3_RESUME)
    if not _skipping:
        cls, _ = apis.owner(apis.KERAS3_EPOCH_STEPS)
        enumerate_steps = cls._enumerate_iterator

        def _enumerate_iterator(self):
            global _skip_next
            skip, _skip_next = _skip_next, 0
            for item in enumerate_steps(self):
                if item[0] >= skip:
                    yield item

        _enumerate_iterator.__wrapped__ = enumerate_steps
        cls._enumerate_iterator = _enumerate_iterator
        _skipping = True
    _skip_next = done


_warned_batch_norm = False


def _warn_batch_norm(model) -> None:
    global _warned_batch_norm
    if _warned_batch_norm:
        return
    names = [layer.name for layer in _layers(model)
             if type(layer).__name__ == "BatchNormalization" and not getattr(layer, "synchronized", False)]
    if names:
        _warned_batch_norm = True
        log.warning(keras3.batch_norm_hint(names))


def _layers(model):
    try:
        return list(model._flatten_layers(include_self=False))
    except (AttributeError, TypeError):
        return list(getattr(model, "layers", []))


def tf_keras_version() -> str | None:
    try:
        from importlib.metadata import version

        return version("tf-keras")
    except Exception:  # (not installed, or no metadata: the line says how to get it)
        return None
