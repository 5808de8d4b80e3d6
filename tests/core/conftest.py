"""The pure tier: nothing here may import Ray or TensorFlow (the import-linter contracts say the same of the
code under test; this says it of the tests). A test that does fails, naming what it imported.

For the check to see anything, no test module of any tier may import Ray or TensorFlow at its top: collection
imports them all before the first test runs. Tests that need Ray or TensorFlow import it inside (fixtures do)."""

import sys

import pytest

HEAVY = ("ray", "tensorflow", "tf_keras", "keras")


def _loaded() -> set[str]:
    return {m for m in HEAVY if m in sys.modules}


@pytest.fixture(scope="session")
def _nothing_heavy_at_start() -> None:
    loaded = _loaded()
    assert not loaded, (f"{sorted(loaded)} loaded before the pure tier ran: a test module or conftest imports it "
                        "at its top; import it inside the tests (or fixtures) that need it")


@pytest.fixture(autouse=True)
def _stays_pure(_nothing_heavy_at_start):
    before = _loaded()
    yield
    arrived = _loaded() - before
    assert not arrived, (f"this test imported {sorted(arrived)}: tests/core is pure; move it to tests/task, "
                         "tests/ray or tests/cluster")
