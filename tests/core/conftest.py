"""The pure tier: nothing here may import Ray or TensorFlow (the import-linter contracts say the same of the
code under test; this says it of the tests). A test that does fails, naming what it imported."""

import sys

import pytest

HEAVY = ("ray", "tensorflow", "tf_keras", "keras")


def _loaded() -> set[str]:
    return {m for m in HEAVY if m in sys.modules}


@pytest.fixture(scope="session")
def _loaded_at_start(request) -> set[str]:
    alone = all("core" in item.keywords for item in request.session.items)
    loaded = _loaded()
    # Run alone (`pytest tests/core`), the tier starts with none loaded; a test module importing one at its top
    # level would otherwise go unnoticed (no test would see it arrive).
    assert not (alone and loaded), f"a tests/core module imports {sorted(loaded)} at import time"
    return loaded


@pytest.fixture(autouse=True)
def _stays_pure(_loaded_at_start):
    before = _loaded()
    yield
    arrived = _loaded() - before
    assert not arrived, (f"this test imported {sorted(arrived)}: tests/core is pure; move it to tests/task, "
                         "tests/ray or tests/cluster")
