"""Every benchmark still imports and parses its command line, in the default run. Their smoke runs (each benchmark
end to end, on its own Ray: 641 s in all here, alone, 2026-11-26) are `-m bench`, outside CI (docs/testing.md): this
is what CI keeps of them, a cheap check that none has rotted at import (a renamed raytf module, a moved helper) or
in its arguments."""

import json
import subprocess
import sys

import pytest

from tests.conftest import ROOT

pytestmark = [pytest.mark.timeout(180)]

# One interpreter for all of them (each `python -m benchmarks.X --help` alone would pay Python's and Ray's import
# again, ~1 s apiece here): runpy runs each module as __main__ with --help, which argparse answers with exit 0.
_HELP_ALL = """
import contextlib, io, json, runpy, sys
out = {}
for name in sys.argv[1:]:
    buf = io.StringIO()
    sys.argv = [name, "--help"]
    with contextlib.redirect_stdout(buf):
        try:
            runpy.run_module(name, run_name="__main__", alter_sys=True)
            code = "returned without exiting"
        except SystemExit as e:
            code = e.code
    out[name] = [code, buf.getvalue()]
out["(imported)"] = sorted(m for m in ("tensorflow", "tf_keras") if m in sys.modules)
out["(ray started)"] = "ray" in sys.modules and sys.modules["ray"].is_initialized()
print(json.dumps(out))
"""


def _with_a_command_line() -> list[str]:
    return sorted(f"benchmarks.{p.stem}" for p in (ROOT / "benchmarks").glob("*.py")
                  if "argparse" in p.read_text() and p.stem != "__init__")


def test_every_benchmark_imports_and_parses_its_command_line():
    names = _with_a_command_line()
    assert {"benchmarks.run", "benchmarks.scale", "benchmarks.recovery", "benchmarks.soak"} <= set(names)
    proc = subprocess.run([sys.executable, "-c", _HELP_ALL, *names], cwd=ROOT, capture_output=True, text=True,
                          timeout=150)
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    bad = {name: code for name, (code, _) in ((n, got[n]) for n in names) if code not in (0, None)}
    assert not bad, bad
    for name in names:
        assert got[name][1].startswith("usage: "), (name, got[name][1][:300])
    # The seven whose smokes are `-m bench` keep the flag those runs use.
    for name in ("run", "data", "data_service", "soak", "scale", "ray_train_loss", "recovery"):
        assert "--smoke" in got[f"benchmarks.{name}"][1], name
    assert got["(imported)"] == []  # --help imports no TensorFlow
    assert got["(ray started)"] is False  # nor starts Ray
