"""A task's look, before training, at whether it has the program (raytf issue 32): the modules the driver listed
(`shipping.CodeNeeds`) and train.script's file, found where this task's process will look for them. Nothing is
imported: no code of the program runs and TensorFlow stays unloaded (a script's child imports it on its own;
importing it here too would cost the task a second copy)."""

from __future__ import annotations

import os
from collections.abc import Iterable

from raytf._core.finder import find_spec
from raytf._core.shipping import SCRIPT, CodeNeeds, Missing


def task_paths(python_path: Iterable[str]) -> list[str]:
    """train.python_path as the driver sent it, its relative entries (a working_dir's: shipping.task_path) taken
    from this task's current directory, its copy of the working_dir: to be called before the training function or
    the script moves elsewhere."""
    return [p if os.path.isabs(p) else os.path.normpath(os.path.join(os.getcwd(), p)) for p in python_path]


def findable(module: str, paths: list[str]) -> bool:
    """Whether `module` can be imported from `paths` or this process's sys.path, without running any of its code
    (the driver reads the program's modules with the same finder)."""
    return find_spec(module, paths) is not None


def missing(needs: CodeNeeds) -> list[Missing]:
    """What of `needs` this task lacks: train.script's file (from its current directory when relative) or the
    program's own module, and if it has that, every module it imports that is not found. (Without the program,
    what it imports says nothing more.)"""
    paths = task_paths(needs.python_path)
    if needs.script:
        script = needs.script if os.path.isabs(needs.script) else os.path.join(os.getcwd(), needs.script)
        if not os.path.isfile(script):
            return [Missing(SCRIPT, script)]
        paths.insert(0, os.path.dirname(script))  # the script's directory is its sys.path[0]
    if needs.program:
        paths.append(os.getcwd())  # a program's child has the task's launch directory on PYTHONPATH
    lacking = [Missing(n.kind, n.module, n.via) for n in needs.modules if not findable(n.module, paths)]
    own = [m for m in lacking if not m.via]
    return own or lacking
