"""A package's names imported on first use (PEP 562 module `__getattr__`), so that importing the package costs only
what its caller uses: a task process answers its address without the driver's API, omegaconf or pyarrow (raytf
issue 38; tests/core/test_layout.py). Stdlib only: every layer's `__init__` may use it."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any


def lazy_attributes(package: str, where: dict[str, str], namespace: dict[str, Any]) -> Callable[[str], Any]:
    """The `__getattr__` for `package`: a name in `where` (name -> the module defining it) is imported from that
    module when first asked for and kept in the package's `namespace` (its globals), so the next lookup is a plain
    attribute; any other name is an AttributeError, as for a module without `__getattr__`."""

    def __getattr__(name: str) -> Any:
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value
        return value

    return __getattr__
