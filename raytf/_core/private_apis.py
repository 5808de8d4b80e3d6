"""Every private (undocumented, or internal) API of TensorFlow, tf-keras and Ray that raytf touches, in one table
(_core/private_api_table.py, whose every name is this module's too): the symbol, what raytf uses it for, the
feature it serves and what happens without it (raytf issue 33).

A private symbol can move or change in any release. So each is looked up through this module (`lookup`), never
imported directly, and a lookup that fails says so in one line:
  - an optional feature (the step-time breakdown, a standby's slots, ...) turns off in that process with ONE
    warning naming the symbol and the versions (`Switches.available`), and the run trains on;
  - a feature correctness needs (exact Keras mid-epoch resume, each worker's own tf-keras checkpoint writes) is
    refused at the task's start, before any step, as a configuration failure (never retried): `require` raises
    `PrivateApiMissing` with one line naming the TF/tf-keras version and the symbol. Never mid-run.
`tests/task/test_private_apis.py` checks every symbol against the installed versions (an upgrade fails raytf's
tests, not a user's run) and that the versions are the ones the table was verified with (`VERIFIED`).
docs/architecture.md's table is generated from this one: `python -m tools.private_api_table --write`.

No Ray, no TensorFlow at import: `lookup` imports the symbol's module by name, in the process that needs it.
"""

from __future__ import annotations

import importlib
import inspect
import sys
import threading
from collections.abc import Callable

from raytf._core.failure import CONFIG

# The table itself: every name of _core/private_api_table.py is this module's too (callers name one module,
# `apis.OWNED_NEXT`).
from raytf._core.private_api_table import *  # noqa: F403
from raytf._core.private_api_table import DISTRIBUTIONS, VERIFIED, Feature, PrivateApi, by_feature


class PrivateApiMissing(RuntimeError):
    """A private symbol raytf needs is missing or changed in the installed version. Raised by `require` (a
    feature correctness needs): a configuration failure, never retried (`failure_kind`)."""

    failure_kind = CONFIG


def _walk(symbol: str):
    module_name, _, path = symbol.partition(":")
    obj = importlib.import_module(module_name)
    for part in path.split("."):
        obj = getattr(obj, part)
    return obj


def problem(api: PrivateApi, resolve: Callable[[str], object] = _walk) -> str | None:
    """What is wrong with `api` in this process's installed version ("is missing", "changed: ..."), None if
    nothing. Imports its module."""
    try:
        obj = resolve(api.symbol)
    except (ImportError, AttributeError) as e:
        return f"is missing ({type(e).__name__}: {e})"
    if api.params or api.keywords:
        try:
            names = list(inspect.signature(obj).parameters)
        except (TypeError, ValueError) as e:
            return f"changed: no signature ({e})"
        if api.params and names[:len(api.params)] != list(api.params):
            return f"changed: its parameters are ({', '.join(names)}), not ({', '.join(api.params)}, ...)"
        absent = [k for k in api.keywords if k not in names]
        if absent:
            return f"changed: no parameter {', '.join(absent)}"
    if api.uses:
        code = getattr(inspect.unwrap(obj), "__code__", None)
        if code is None:
            return "changed: not Python code any more"
        absent = [n for n in api.uses if n not in _names(code)]
        if absent:
            return f"changed: its code no longer uses {', '.join(absent)}"
    return None


def _names(code) -> set[str]:
    """Every global and attribute name a code object uses, its nested functions' too, and the names it spells as
    strings (getattr(cb, "_supports_tf_logs", False))."""
    out = set(code.co_names)
    for const in code.co_consts:
        if inspect.iscode(const):
            out |= _names(const)
        elif isinstance(const, str) and const.isidentifier():
            out.add(const)
    return out


_found: dict[str, object] = {}


def lookup(api: PrivateApi):
    """The symbol itself (checked once per process); raises PrivateApiMissing (with `problem`'s words) if it is
    missing or changed."""
    if api.symbol not in _found:
        why = problem(api)
        if why is not None:
            raise PrivateApiMissing(f"{api.dotted} {why}")
        _found[api.symbol] = _walk(api.symbol)
    return _found[api.symbol]


def owner(api: PrivateApi) -> tuple[object, str]:
    """(the object that holds the symbol, its attribute name): what raytf patches (a class and its method, a module
    and its global), once `problem` said it is there."""
    module, _, path = api.symbol.partition(":")
    holder, _, last = path.rpartition(".")
    return (_walk(f"{module}:{holder}") if holder else importlib.import_module(module)), last


def version(package: str) -> str:
    """The installed version of `package` ("?" if unknown): the imported module's, else the distribution's."""
    if package == "os":
        import platform

        return platform.python_version()
    module = sys.modules.get(package)
    found = getattr(module, "__version__", None) if module is not None else None
    if found:
        return str(found)
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as dist_version

    for dist in DISTRIBUTIONS.get(package, (package,)):
        try:
            return dist_version(dist)
        except PackageNotFoundError:
            continue
    return "?"


def _versions(packages) -> str:
    """"tensorflow 2.22.0, tf_keras 2.22.0" for the packages a feature's symbols come from (and TF with tf-keras:
    the two move together)."""
    wanted = list(dict.fromkeys(packages))
    if "tf_keras" in wanted and "tensorflow" not in wanted:
        wanted.insert(0, "tensorflow")
    return ", ".join(f"{p} {version(p)}" for p in wanted)


def _verified(packages) -> str:
    return ", ".join(f"{p} {VERIFIED[p]}" for p in dict.fromkeys(packages) if p in VERIFIED)


def off_line(api: PrivateApi, why: str) -> str:
    """The one warning of an optional feature turned off."""
    verified = _verified([api.package])
    return (f"{api.dotted} {why} ({_versions([api.package])}; raytf was verified with {verified or 'others'}): "
            f"{api.feature.name} is off: {api.feature.without}")


def refusal_line(api: PrivateApi, why: str) -> str:
    """The one line of a run refused for a feature correctness needs."""
    verified = _verified(["tensorflow", "tf_keras"] if api.package == "tf_keras" else [api.package])
    return (f"{_versions([api.package])}: {api.dotted} {why}; raytf needs it for {api.feature.name} ("
            f"without it {api.feature.without.split(': refused')[0]}). Fix: install the versions raytf was "
            f"verified with ({verified}), or a raytf that supports these")


def require(feature: Feature) -> None:
    """Raise PrivateApiMissing (a configuration failure: never retried) with one line naming the versions and the
    symbol when any of the `feature`'s symbols is missing or changed. For the features correctness needs, at the
    task's start."""
    for api in by_feature(feature):
        why = problem(api)
        if why is not None:
            raise PrivateApiMissing(refusal_line(api, why))


class Switches:
    """A process's optional features: each is checked once (all its symbols), and one that cannot work is off with
    one warning (through `warn`), for the rest of the process. `turn_off` for a failure found later (a traced
    call that raised)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._state: dict[str, bool] = {}  # feature key -> available

    def available(self, feature: Feature, warn: Callable[[str], None]) -> bool:
        with self._lock:
            known = self._state.get(feature.key)
        if known is not None:
            return known
        for api in by_feature(feature):
            why = problem(api)
            if why is not None:
                self.turn_off(api, why, warn)
                return False
        with self._lock:
            return self._state.setdefault(feature.key, True)

    def turn_off(self, api: PrivateApi, why: str, warn: Callable[[str], None]) -> None:
        with self._lock:
            first = self._state.get(api.feature.key) is not False
            self._state[api.feature.key] = False
        if first:
            warn(off_line(api, why))

    def is_off(self, feature: Feature) -> bool:
        with self._lock:
            return self._state.get(feature.key) is False

    def reset(self) -> None:
        """Forget what was checked (tests)."""
        with self._lock:
            self._state.clear()
        _found.clear()


# This process's switches: features are per process (each task's, the driver's).
SWITCHES = Switches()


def available(feature: Feature, warn: Callable[[str], None]) -> bool:
    return SWITCHES.available(feature, warn)
