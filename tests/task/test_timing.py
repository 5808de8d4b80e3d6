"""The step-time breakdown measured inside TensorFlow (raytf/_task/timing.py): time blocked in get_next, eagerly and
inside traced functions (Keras fit's own), told apart from the step's compute."""

import time

import numpy as np
import pytest

from raytf._core.breakdown import COMPUTE, INPUT_WAIT, STEP_TIME, Split

pytestmark = pytest.mark.timeout(120)

DELAY = 0.03  # seconds the slow input takes per element


def _slow_dataset(tf, n: int, delay: float):
    def gen():
        for i in range(n):
            time.sleep(delay)  # the input pipeline's own work: what the step waits for
            yield [float(i)] * 4, [float(i % 2)]

    return tf.data.Dataset.from_generator(gen, output_signature=(
        tf.TensorSpec([4], tf.float32), tf.TensorSpec([1], tf.float32)))


def _waited(timing, fn) -> float:
    before = timing.totals().get(INPUT_WAIT, 0.0)
    fn()
    return timing.totals()[INPUT_WAIT] - before


def test_eager_next_is_timed(tf):
    from raytf._task import timing

    timing.install()
    timing.install()  # idempotent: wrapped once
    n = 8
    waited = _waited(timing, lambda: [None for _ in _slow_dataset(tf, n, DELAY)])
    assert n * DELAY * 0.8 <= waited <= n * DELAY * 3


def _without_prefetch(tf, ds):
    """The generator runs inside get_next itself: each next() blocks for the whole DELAY, however loaded the machine
    (tf.data's autotuned prefetch would otherwise hide part of it behind the step, by an amount the load decides)."""
    opts = tf.data.Options()
    opts.autotune.enabled = False
    opts.experimental_optimization.inject_prefetch = False
    return ds.with_options(opts)


def _compute_for(tf, x, seconds: float):
    """A step's compute that lasts at least `seconds` on any machine, after the input arrived (a control edge)."""
    with tf.control_dependencies([x]):
        return tf.numpy_function(lambda: (time.sleep(seconds), np.float32(0.0))[1], [], tf.float32)


def test_next_inside_a_traced_function_is_timed(tf):
    """A get_next traced into a graph (as Keras fit's train_function does) adds its wait each time the graph runs,
    and not the compute after it. Bounds from sleeps, never from ratios of timings: a loaded machine only makes the
    sleeps longer, never shorter (the earlier ratio test failed under load)."""
    from raytf._task import timing

    timing.install()
    steps, compute = 8, 0.05

    @tf.function
    def step(iterator):
        x, _ = next(iterator)
        return _compute_for(tf, x, compute)

    for ds, least_wait in ((_without_prefetch(tf, _slow_dataset(tf, steps + 1, DELAY)), DELAY),
                           (tf.data.Dataset.from_tensor_slices(([[1.0] * 4] * 4, [[0.0]] * 4)).repeat(), 0.0)):
        it = iter(ds)
        step(it)  # traced here
        t = time.perf_counter()
        waited = _waited(timing, lambda it=it: [step(it) for _ in range(steps)])
        elapsed = time.perf_counter() - t
        # Every run of the graph blocked in get_next for its element: all of it is counted ...
        assert waited >= 0.95 * steps * least_wait, (waited, elapsed)
        # ... and the compute after it (each step sleeps `compute`) is not.
        assert waited <= elapsed - 0.95 * steps * compute, (waited, elapsed)


def test_keras_fit_input_wait_in_the_breakdown(tf):
    """Keras fit's own train_function, fed a slow input: the rows' input_wait_s is most of step_time_s."""
    from raytf._task import timing

    timing.install()
    split = Split(timing.totals)
    model = tf.keras.Sequential([tf.keras.layers.Dense(8, activation="relu"), tf.keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    steps = 10
    model.fit(_slow_dataset(tf, 2, 0.0).batch(2).repeat(), epochs=1, steps_per_epoch=2, verbose=0)  # traced
    split.mark()
    t = time.perf_counter()
    model.fit(_slow_dataset(tf, steps * 2, DELAY / 2).batch(2), epochs=1, steps_per_epoch=steps, verbose=0)
    row = split.row(time.perf_counter() - t, steps)
    assert row[INPUT_WAIT] >= DELAY * 0.8, row
    assert row[INPUT_WAIT] <= row[STEP_TIME], row
    # Most of the step, not all: run after some other tests of this tier in one process, fit's steps here took ~65 ms
    # for ~31 ms of input wait (the rest outside get_next, not explained yet), against ~30 ms of step alone.
    assert row[INPUT_WAIT] >= 0.4 * row[STEP_TIME], row
    assert row[COMPUTE] < 2 * row[INPUT_WAIT], row

