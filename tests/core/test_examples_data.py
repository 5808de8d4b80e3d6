"""The examples' data (examples/data.py): scikit-learn's bundled digits, read from the file it ships without
importing scikit-learn (its import cost every task ~1.2 s of CPU)."""

import sys

import numpy as np

from examples import data


def test_the_digits_are_scikit_learns_without_its_import(monkeypatch):
    for name in [m for m in sys.modules if m == "sklearn" or m.startswith("sklearn.")]:
        monkeypatch.delitem(sys.modules, name)
    (x, y), (xv, yv) = data.digits(seed=3)
    assert "sklearn" not in sys.modules
    assert x.shape == (1438, 8, 8, 1) and xv.shape == (359, 8, 8, 1) and x.dtype == np.float32 and y.dtype == np.int64
    assert x.min() >= 0.0 and x.max() <= 1.0 and set(np.unique(y)) == set(range(10))
    monkeypatch.setattr(data, "_bundled_digits", lambda: None)  # what load_digits gives, split the same way
    (x2, y2), (xv2, yv2) = data.digits(seed=3)
    assert np.array_equal(x, x2) and np.array_equal(y, y2) and np.array_equal(xv, xv2) and np.array_equal(yv, yv2)
