"""tf.data iterators torn down off the training thread (raytf issue 33: `Model.fit` stalling 10-60 s after its last
epoch). Runs in the task's process only; TensorFlow imported lazily.

The stall is a race in TensorFlow (seen with 2.21; the code is the same on TF's master): an iterator with autotuning
on (the default: any `prefetch(AUTOTUNE)`) runs a "tf_data_model" thread that sleeps between optimisation rounds,
each period twice the last, up to 60 s (`Model::OptimizeLoop`, tensorflow/core/framework/model.cc,
`kOptimizationPeriodMaxMs`). Deleting the iterator cancels it: `CancellationManager::StartCancel` runs the model's
callback, which wakes the thread, and only afterwards marks itself cancelled (tensorflow/core/platform/
cancellation.cc / tsl). A thread that wakes and looks before that sees "not cancelled" and sleeps out the rest of
its period; the iterator's destructor (`RootDataset::Iterator::~Iterator`, joining that thread) waits with it. So
whoever drops the last reference to an iterator waits up to its current period, i.e. up to about the iterator's age,
at most 60 s: a Keras `fit` on its return (its DataHandler's iterator), a per-epoch or validation iterator at its
epoch's end. Seen here: 1.3-8.7 s in 9 of 16 2-worker fits of 3 epochs (benchmarks/fit_stall.py, a loaded
machine); 10-30 s in longer CI runs.

raytf cannot fix the race, but it can keep the wait off the training thread: an iterator's resource handle is
dropped by a short-lived daemon thread instead of the thread that dropped the iterator (TF releases the GIL while it
deletes a handle, tensorflow/python/eager/pywrap_tensor.cc's EagerTensor_dealloc: that thread waits alone). A task
actor's process is ended by `ray.kill`; a script's process, after its script, its final checkpoint sync and its exit
handlers, waits for those threads a tenth of a second (`wait`) and then leaves without the interpreter's shutdown,
which a thread still inside TF's destructor could crash (script/leaving.py). The pipeline's buffers are freed at
once either way (the prefetch threads are joined before the model thread); only the idle model thread waits. The
symbol used is in raytf/_core/private_apis.py (ITERATOR_TEARDOWN); without it, the stall stays. No upstream issue
was found for this race (searched: TF's issues on iterator teardown and autotuning); reproducer: `python -m
benchmarks.fit_stall`.
"""

from __future__ import annotations

import functools
import logging
import sys
import threading
import time
import weakref

from raytf._core import private_apis as apis

log = logging.getLogger(__name__)

_lock = threading.Lock()
_installed = False
deferred = 0  # handles handed to a teardown thread in this process (tests, diagnostics)


def _drop(holder: list, wait_s: float = 2.0) -> None:
    """Drop the last reference to an iterator's resource: its C++ teardown runs (and waits) here. The collected
    iterator's own reference goes a moment after the finalizer that started this thread (its attributes are cleared
    after its weak references' callbacks, and clearing one may let this thread run first): wait for it, briefly."""
    deadline = time.monotonic() + wait_s
    while sys.getrefcount(holder[0]) > 2 and time.monotonic() < deadline:  # (the list's and the call's own)
        time.sleep(0.002)
    holder.clear()


_threads: list[threading.Thread] = []


def _defer(handle) -> None:
    """Called when an iterator is collected, with its resource handle (`weakref.finalize` holds it until then)."""
    global deferred
    holder = [handle]
    del handle
    deferred += 1
    t = threading.Thread(target=_drop, args=(holder,), name="raytf-iterator-teardown", daemon=True)
    t.start()
    holder = None  # (the thread's list now holds the only reference)
    with _lock:
        _threads[:] = [x for x in _threads if x.is_alive()] + [t]


def wait(timeout_s: float = 65.0) -> bool:
    """Until every teardown handed to a thread is done (at most `timeout_s`: TF's longest wait is 60 s); whether
    they all are. A script's process calls it before the interpreter's shutdown, which a thread still inside TF's
    destructor could crash."""
    deadline = time.monotonic() + timeout_s
    with _lock:
        threads = list(_threads)
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    return not any(t.is_alive() for t in threads)


def install() -> bool:
    """Defer the teardown of every eager tf.data iterator this process makes from now on (idempotent). False when
    TensorFlow's iterator is not as raytf knows it: the feature is off, with one warning, and nothing changes."""
    global _installed
    with _lock:
        if _installed:
            return True
        if not apis.available(apis.ITERATOR_TEARDOWN, log.warning):
            return False
        from tensorflow.python.data.ops import iterator_ops

        original = iterator_ops.OwnedIterator._create_iterator

        @functools.wraps(original)
        def _create_iterator(self, dataset):
            original(self, dataset)
            import tensorflow as tf

            handle = getattr(self, "_iterator_resource", None)
            if handle is not None and tf.executing_eagerly():
                # Not at the interpreter's exit (an iterator still alive then is TF's to tear down, as before).
                weakref.finalize(self, _defer, handle).atexit = False

        iterator_ops.OwnedIterator._create_iterator = _create_iterator
        _installed = True
        return True
