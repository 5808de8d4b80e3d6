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


@pytest.fixture
def cli(capsys, monkeypatch):
    """A command line run in this process: `cli("raytf.launch", "conf/local.yaml", "x=1")` -> (exit code, stdout,
    stderr), as a shell would see them. The bad-input paths of the CLIs without a Python start each (~0.6 s apiece
    here, 17 of them in one module). What a subprocess showed is here too: the code main() returns (or argparse's
    SystemExit), what it printed; a traceback is an exception, which fails the test; and this tier's own check
    (`_stays_pure`) fails a case that imported Ray or TensorFlow, as the subprocesses' unimportable `ray` did.
    One case per CLI stays a real process (test_cli_usage_error_exits_2, test_cli_missing_run_exits_2...)."""
    import importlib
    import logging

    from tests.conftest import ROOT

    monkeypatch.chdir(ROOT)
    raytf_logger = logging.getLogger("raytf")
    monkeypatch.setattr(raytf_logger, "level", raytf_logger.level)  # (main() sets it; put back afterwards)
    root = logging.getLogger()
    handlers = list(root.handlers)

    def run(module: str, *argv: str) -> tuple[int, str, str]:
        main = importlib.import_module(module).main
        capsys.readouterr()
        try:
            code = main([str(a) for a in argv])
        except SystemExit as e:  # argparse's usage errors
            code = e.code
        finally:
            root.handlers[:] = handlers  # (main()'s logging.basicConfig, if it added one)
        out, err = capsys.readouterr()
        return code, out, err

    return run
