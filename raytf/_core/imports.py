"""What a program imports for certain, read from its source without running it: the imports that run whenever the
module is imported (or run as a script), so a task can be told before training that one of them is missing on its
host. Pure: source text in, names out.

Only unconditional imports count, so that a name found here is one the program cannot run without: statements at
the module's top level, in `if __name__ == "__main__":` when the module runs as the program, and at the top of the
training function's body. Imports under `try`, any other `if` (TYPE_CHECKING, a platform test) or inside other
functions may be optional and are left out: the check misses them, it never refuses a program that would run.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass


@dataclass(frozen=True)
class Import:
    """One import statement's target: `import a.b` is Import("a.b"); `from .x import y, z` in package p.q is
    Import("p.q.x", ("y", "z")) once made absolute (`absolute`)."""

    module: str
    names: tuple[str, ...] = ()
    level: int = 0  # 0: absolute; N: relative, N packages up (before `absolute`)


def _is_main_guard(node: ast.stmt) -> bool:
    """`if __name__ == "__main__":` (either way round)."""
    if not isinstance(node, ast.If) or not isinstance(node.test, ast.Compare) or len(node.test.ops) != 1:
        return False
    left, right = node.test.left, node.test.comparators[0]
    sides = {type(left), type(right)}
    if not isinstance(node.test.ops[0], ast.Eq) or sides != {ast.Name, ast.Constant}:
        return False
    name, const = (left, right) if isinstance(left, ast.Name) else (right, left)
    return name.id == "__name__" and const.value == "__main__"


def _of(body: list[ast.stmt]) -> list[Import]:
    out: list[Import] = []
    for node in body:
        if isinstance(node, ast.Import):
            out += [Import(alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            out.append(Import(node.module or "", tuple(a.name for a in node.names if a.name != "*"), node.level))
    return out


def imports_of(source: str, *, main: bool = False, function: str | None = None) -> list[Import]:
    """The unconditional imports of a module's source: its top level, its `__main__` block when it runs as the
    program (`main`), and the top of `function`'s body (the training function). Relative ones keep their level.
    A source that does not parse gives none (running it will say why, with its traceback)."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return []
    out = _of(tree.body)
    for node in tree.body:
        if main and _is_main_guard(node):
            out += _of(node.body)
        if function and isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == function:
            out += _of(node.body)
    return [i for i in out if i.module != "__future__"]


def absolute(imp: Import, package: str) -> Import | None:
    """A relative import made absolute from the importing module's package (its `__package__`: "" for a top-level
    module); None when it reaches above the top (Python would refuse it too)."""
    if imp.level == 0:
        return imp
    parts = package.split(".") if package else []
    if len(parts) < imp.level:
        return None
    base = parts[: len(parts) - (imp.level - 1)]
    return Import(".".join([*base, *([imp.module] if imp.module else [])]), imp.names)


def top(module: str) -> str:
    """The distribution-level name a task must find: `sklearn` for `sklearn.model_selection`."""
    return module.partition(".")[0]
