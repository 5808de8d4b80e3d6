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


def test_no_two_classes_of_the_package_share_a_name():
    """A class name says one concept (raytf issue 70: `Decision` and `Row` were each defined twice, read as one).
    raytf.compat's are Ray Train's names on purpose (a Ray Train program's `except TrainingFailedError`, its
    `Result`), kept apart from raytf's own."""
    import ast
    from collections import defaultdict

    package = ROOT / "raytf"
    where = defaultdict(list)
    for path in sorted(package.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and path.name != "compat.py":
                where[node.name].append(str(path.relative_to(package)))
    assert {name: paths for name, paths in where.items() if len(paths) > 1} == {}


def test_no_module_is_over_320_lines():
    """Room to grow (raytf issue 51): a module near the cap is split by concept before it grows, never squeezed."""
    package = ROOT / "raytf"
    long = {str(p.relative_to(package)): n for p in sorted(package.rglob("*.py"))
            if (n := len(p.read_text().splitlines())) > 320}
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


def test_the_import_contracts_hold():
    """pyproject.toml's [tool.importlinter] contracts, as `lint-imports` checks them: where code runs decides what
    it may import (docs/architecture.md). Here rather than as a command of its own: the README's test command then
    works with an interpreter called by its path, whose environment's scripts are on no PATH. (In a process of its
    own: import-linter's logging set-up disables the loggers that exist, raytf's among them.)"""
    code = "import sys; from importlinter.cli import lint_imports_command; sys.exit(lint_imports_command())"
    out = subprocess.run([sys.executable, "-c", code, "--no-cache"], capture_output=True, text=True, cwd=ROOT,
                         timeout=120)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    assert "0 broken" in out.stdout


def _pinned(lock: str) -> dict[str, str]:
    """name -> version of each `name==version` line of a requirements file (lower case, `_` as `-`)."""
    import re

    pins = {}
    for m in re.finditer(r"^([A-Za-z0-9_.\-]+)==([^\s;\\]+)", lock, re.MULTILINE):
        pins[re.sub(r"[-_.]+", "-", m.group(1)).lower()] = m.group(2)
    return pins


def test_the_test_lock_holds_every_dependency_the_project_names():
    """requirements/test.txt (what the README's test command and CI install) pins every package pyproject.toml asks
    for, at a version its range admits, each with hashes: a dependency added or a range narrowed without refreshing
    the lock fails here (the command that refreshes it is the file's first lines)."""
    import re

    import tomllib
    from packaging.requirements import Requirement

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    lock = (ROOT / "requirements/test.txt").read_text()
    pins = _pinned(lock)
    wanted = [Requirement(r) for r in [*project["dependencies"], *project["optional-dependencies"]["test"]]]
    problems = []
    for req in wanted:
        name = re.sub(r"[-_.]+", "-", req.name).lower()
        if name not in pins:
            problems.append(f"{req.name}: not in the lock")
        elif not req.specifier.contains(pins[name], prereleases=True):
            problems.append(f"{req.name}: locked at {pins[name]}, outside {req.specifier}")
    assert problems == [], problems
    entries = re.split(r"\n(?=[A-Za-z0-9])", lock[lock.index("\n", lock.index("uv pip compile")) + 1:])
    unhashed = [e.split()[0] for e in entries if "==" in e.split("\n")[0] and "--hash=sha256:" not in e]
    assert unhashed == []
    assert "uv pip compile pyproject.toml --extra test --generate-hashes" in lock.split("\n", 3)[1]
