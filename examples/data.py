"""Data for the examples: scikit-learn's bundled 8x8 digits (no download), or synthetic images."""

from __future__ import annotations

import numpy as np


def digits(seed: int = 0, validation_fraction: float = 0.2):
    """((x_train, y_train), (x_val, y_val)) with x of shape (n, 8, 8, 1) scaled to [0, 1]."""
    try:
        from sklearn.datasets import load_digits
    except ImportError:  # keep the examples runnable without the `examples` extra
        return synthetic(seed=seed, validation_fraction=validation_fraction)
    data = load_digits()
    x = (data.images / 16.0).astype("float32")[..., None]
    y = data.target.astype("int64")
    return _split(x, y, seed, validation_fraction)


def synthetic(n: int = 2048, seed: int = 0, validation_fraction: float = 0.2, classes: int = 10):
    """Learnable synthetic 8x8 images: each class is a fixed random pattern plus noise."""
    rng = np.random.default_rng(seed)
    patterns = rng.random((classes, 8, 8, 1), dtype=np.float32)
    y = rng.integers(0, classes, size=n)
    x = patterns[y] + 0.3 * rng.standard_normal((n, 8, 8, 1)).astype("float32")
    return _split(x.astype("float32"), y.astype("int64"), seed, validation_fraction)


def _split(x, y, seed, validation_fraction):
    idx = np.random.default_rng(seed).permutation(len(x))
    n_val = int(len(x) * validation_fraction)
    val, train = idx[:n_val], idx[n_val:]
    return (x[train], y[train]), (x[val], y[val])
