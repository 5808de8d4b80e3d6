"""The step-time breakdown measured inside TensorFlow (raytf/_task/timing.py): time blocked in get_next, eagerly and
inside traced functions (Keras fit's own), told apart from the step's compute."""

import time

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


def _heavy(tf, x, rounds: int = 40):
    """Matmuls on the batch (nothing grappler could fold away): the step's own compute."""
    m = tf.tile(tf.reshape(x, [1, 4]), [160, 40])
    for _ in range(rounds):
        m = tf.math.tanh(tf.linalg.matmul(m, m, transpose_b=True)[:, :160] / 160.0)
    return tf.reduce_sum(m)


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


def test_next_inside_a_traced_function_is_timed(tf):
    """A get_next traced into a graph (as Keras fit's train_function does) adds its wait each time the graph runs,
    and not the compute after it."""
    from raytf._task import timing

    timing.install()
    steps = 8

    @tf.function
    def step(iterator):
        x, _ = next(iterator)
        return _heavy(tf, x)

    slow = iter(_slow_dataset(tf, steps + 1, DELAY))
    step(slow)  # traced here
    t = time.perf_counter()
    waited = _waited(timing, lambda: [step(slow) for _ in range(steps)])
    elapsed = time.perf_counter() - t
    # (tf.data prefetches the generator's next element during the step's compute: the wait is the rest of it)
    assert 0.6 * elapsed <= waited <= elapsed, (waited, elapsed)

    @tf.function
    def heavy_step(iterator):  # compute well above get_next's own few ms on a loaded machine
        x, _ = next(iterator)
        return _heavy(tf, x, rounds=200)

    fast = iter(tf.data.Dataset.from_tensor_slices(([[1.0] * 4] * 4, [[0.0]] * 4)).repeat())
    heavy_step(fast)
    t = time.perf_counter()
    waited_fast = _waited(timing, lambda: [heavy_step(fast) for _ in range(steps)])
    elapsed_fast = time.perf_counter() - t
    # The compute (matmuls) is most of these steps; the wait is a small part of it.
    assert waited_fast < 0.25 * elapsed_fast, (waited_fast, elapsed_fast)


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

