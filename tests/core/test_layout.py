"""The package's public face and its layout: every name in raytf.__all__ resolves, modules are not shadowed by
the functions of the same name, and `import raytf` (what a user's script does for raytf.report) stays light."""

import importlib
import pickle
import subprocess
import sys
import types

import raytf
from tests.conftest import ROOT


def test_every_public_name_resolves():
    for name in raytf.__all__:
        assert not isinstance(getattr(raytf, name), types.ModuleType), name  # a function, class or constant
    assert raytf.TrainContext.__module__ == "raytf._task.context"
    assert raytf.Result.__module__ == "raytf.api.result"


def test_functions_do_not_shadow_their_modules():
    assert callable(raytf.sweep) and callable(raytf.scaling)
    assert importlib.import_module("raytf.api.sweep").sweep is raytf.sweep
    assert importlib.import_module("raytf.api.scaling").scaling is raytf.scaling
    import raytf.api.sweep as sweep_module

    assert sweep_module.__name__ == "raytf.api.sweep"


def test_import_raytf_is_light():
    code = ("import sys, raytf; raytf.report({'loss': 1.0}); "
            "print(sorted(m for m in ('ray', 'tensorflow', 'tf_keras', 'pyarrow', 'pandas', 'matplotlib') "
            "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def _imports(path) -> set[str]:
    import ast

    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            names |= {node.module} | {f"{node.module}.{a.name}" for a in node.names}
    return names


def test_only_the_storage_package_opens_storage():
    """pyarrow.fs (what opens storage) only in raytf/_storage/ and raytf/_s3.py: every other module reads and writes
    the run directory through RunDir, with its one retry rule. (import-linter cannot name an external package's
    submodule, so this is checked here.)"""
    package = ROOT / "raytf"
    outside = [str(p.relative_to(package)) for p in sorted(package.rglob("*.py"))
               if p.parent.name != "_storage" and p.name != "_s3.py" and "pyarrow.fs" in _imports(p)]
    assert outside == []


def test_no_module_is_over_350_lines():
    package = ROOT / "raytf"
    long = {str(p.relative_to(package)): n for p in sorted(package.rglob("*.py"))
            if (n := len(p.read_text().splitlines())) > 350}
    assert long == {} and len((package / "_driver" / "driver.py").read_text().splitlines()) < 250


def test_a_task_answers_before_it_imports_storage_or_config_loading(tmp_path):
    """A task's process imports its actor's module and checks the storage marker before it answers the driver
    (group.addresses): none of pyarrow, numpy, omegaconf or pandas (~0.4 s a task, paid by every task on the same
    cores of one machine: benchmarks.scale, issue 38), nor the config's schema and rules (25-40 ms more: the task
    unpickles its Config with its TaskRun). Ray itself is imported there anyway (a Ray worker)."""
    code = ("import pickle, sys, raytf._task.actor; marker = pickle.loads(sys.stdin.buffer.read()); "
            "print(marker.visible(), sorted(m for m in ('pyarrow', 'numpy', 'omegaconf', 'pandas', 'tensorflow', "
            "'raytf.config.schema', 'raytf.config.rules') if m in sys.modules))")
    from raytf._storage import RunDir

    rd = RunDir(str(tmp_path), "run")
    rd.makedirs()
    marker = rd.marker(rd.write_storage_marker())
    out = subprocess.run([sys.executable, "-c", code], input=pickle.dumps(marker), capture_output=True, cwd=ROOT,
                         timeout=120)
    assert out.returncode == 0, out.stderr.decode()
    assert out.stdout.decode().strip() == "True []"
