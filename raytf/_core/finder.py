"""Where a module would be imported from, found without importing it (raytf issue 32's code check): the driver
reads the program's modules this way, and each task looks for them the same way before training. And where a
program of the running interpreter's environment is (py-spy for a hung task's stacks)."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import shutil
import sys
import sysconfig


def find_spec(module: str, paths: list[str]) -> importlib.machinery.ModuleSpec | None:
    """`module`'s spec from `paths` or this process's sys.path, None when not found; none of its code runs: a
    package's submodules are looked for in its directories (importlib.util.find_spec on a dotted name would import
    the package, its __init__ and whatever that imports, TensorFlow say). Reads the filesystem, nothing else."""
    head, _, rest = module.partition(".")
    spec = importlib.machinery.PathFinder.find_spec(head, paths) if paths else None
    if spec is None:
        try:  # the interpreter's own finders too (built-ins, an editable install's finder); nothing is run
            spec = importlib.util.find_spec(head)
        except (ImportError, ValueError):
            return None
    name = head
    for part in rest.split(".") if rest else ():
        if spec is None or not spec.submodule_search_locations:
            return None
        name = f"{name}.{part}"
        spec = importlib.machinery.PathFinder.find_spec(name, list(spec.submodule_search_locations))
    return spec


def find_program(name: str, interpreter: str | None = None, path: str | None = None) -> str | None:
    """The executable `name` of the running interpreter's environment, else the first on `path` ($PATH when None);
    None when neither has it.

    Beside the interpreter first: a virtual environment's Python called by its path (cron, systemd, an IDE, CI)
    has its scripts directory on no PATH, and `shutil.which` alone would miss what that environment installed
    (raytf issue 50: py-spy, installed with ray[default], "not installed on this node"). The interpreter's path is
    taken as given, not resolved: a venv's `bin/python` is a symlink to the base interpreter, whose directory is
    not the venv's."""
    interpreter = sys.executable if interpreter is None else interpreter
    beside = [os.path.dirname(interpreter)] if interpreter else []
    if interpreter == sys.executable:
        beside.append(sysconfig.get_path("scripts"))
    for directory in dict.fromkeys(d for d in beside if d):
        found = shutil.which(name, path=directory)
        if found is not None:
            return found
    return shutil.which(name, path=path)
