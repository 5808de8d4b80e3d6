"""Data for the examples: scikit-learn's bundled 8x8 digits (no download), or synthetic images."""

from __future__ import annotations

import gzip
import importlib.util
import os

import numpy as np


def digits(seed: int = 0, validation_fraction: float = 0.2):
    """((x_train, y_train), (x_val, y_val)) with x of shape (n, 8, 8, 1) scaled to [0, 1]."""
    loaded = _bundled_digits()
    if loaded is None:
        try:
            from sklearn.datasets import load_digits
        except ImportError:  # keep the examples runnable without the `examples` extra
            return synthetic(seed=seed, validation_fraction=validation_fraction)
        data = load_digits()
        loaded = data.images, data.target
    images, target = loaded
    x = (images / 16.0).astype("float32")[..., None]
    y = target.astype("int64")
    return _split(x, y, seed, validation_fraction)


def _bundled_digits() -> tuple[np.ndarray, np.ndarray] | None:
    """(images (n, 8, 8), labels) read straight from the CSV scikit-learn ships (what `load_digits` reads), without
    importing scikit-learn: its import (SciPy and all) cost every task ~1.2 s of CPU, the file 25 ms. None where
    scikit-learn is not installed or keeps the file elsewhere (then `load_digits` itself)."""
    spec = importlib.util.find_spec("sklearn")  # (a top-level package's spec: nothing of it runs)
    for root in (spec.submodule_search_locations or []) if spec is not None else []:
        path = os.path.join(root, "datasets", "data", "digits.csv.gz")
        if os.path.isfile(path):
            with gzip.open(path, "rt") as f:
                data = np.loadtxt(f, delimiter=",")
            return data[:, :-1].reshape(-1, 8, 8), data[:, -1]
    return None


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
