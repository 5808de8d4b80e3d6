"""Where a module would be imported from, found without importing it (raytf issue 32's code check): the driver
reads the program's modules this way, and each task looks for them the same way before training."""

from __future__ import annotations

import importlib.machinery
import importlib.util


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
