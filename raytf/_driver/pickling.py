"""Functions given as values (`raytf.fit(cfg, train_fn=train)`): pickled here, in the driver, with Ray's own
serializer, to travel to the tasks (raytf._core.function says what is sent by value and what by reference). Ray's
cloudpickle is imported only to pickle (`pack`): what the config records of a function (`label_of`) needs no Ray.
Never TensorFlow."""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import Any

from raytf._core.function import Functions, PickledFunction, label
from raytf._core.raytrain import StartingFrom
from raytf.errors import ConfigError


def _importable(fn: Any, module: str, qualname: str) -> bool:
    """Whether a task can import `fn` as `module:qualname` (what cloudpickle would pickle by reference)."""
    owner = sys.modules.get(module)
    if owner is None or module == "__main__" or getattr(owner, "__spec__", None) is None:
        return False
    return getattr(owner, qualname, None) is fn


def label_of(fn: Callable[..., Any], arg: str) -> str:
    """What the config records of `fn` (raytf._core.function.label); `arg` names it in the error for a value that
    is not a function. No pickling, no Ray: `raytf.plan(cfg, train_fn=...)` records it so."""
    if not callable(fn):
        raise ConfigError(f"{arg} ({fn!r}) is a {type(fn).__name__}, not a function. Fix: pass the function itself, "
                          f"e.g. {arg}=train (no parentheses)")
    if isinstance(fn, StartingFrom):  # (a v1 loop with its starting checkpoint: recorded as the loop)
        fn = fn.loop
    named = fn.func if isinstance(fn, functools.partial) else fn  # (a partial is named after its function)
    module = str(getattr(named, "__module__", None) or "?")
    qualname = str(getattr(named, "__qualname__", None) or type(named).__name__)
    return label(qualname, module, named is fn and _importable(fn, module, qualname))


def recorded(train_fn=None, eval_fn=None) -> Functions:
    """The functions as the config records them, not pickled (their data empty): what a plan needs of them."""
    return Functions(*(PickledFunction(label_of(fn, arg), b"") if fn is not None else None
                       for fn, arg in ((train_fn, "train_fn"), (eval_fn, "eval_fn"))))


def pack(fn: Callable[..., Any] | PickledFunction | None, arg: str) -> PickledFunction | None:
    """`fn` pickled for the tasks (None: none given; already packed: as it is). `arg` names it in errors."""
    if fn is None or isinstance(fn, PickledFunction):
        return fn
    what = label_of(fn, arg)
    from ray import cloudpickle

    try:
        data = cloudpickle.dumps(fn)
    except Exception as e:  # a lock, a socket, an open file in what the function refers to
        raise ConfigError(f"{arg} ({what}) cannot be pickled to send it to the tasks: {type(e).__name__}: {e}. Fix: "
                          "create that object inside the function, or put the function in a module and pass "
                          "train.entrypoint=package.module:function") from None
    return PickledFunction(what, data)


def functions(train_fn=None, eval_fn=None) -> Functions:
    return Functions(train=pack(train_fn, "train_fn"), evaluate=pack(eval_fn, "eval_fn"))
