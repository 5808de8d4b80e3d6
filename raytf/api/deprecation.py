"""Old call forms kept for one minor version (CHANGELOG.md's deprecation policy): each still works, with a
DeprecationWarning naming the new form and the version it goes in."""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])

SINCE, GOES = "0.2", "0.3"


def warn(old: str, new: str, stacklevel: int = 3) -> None:
    """The warning for `old`, deprecated since SINCE and going in GOES, naming `new`."""
    warnings.warn(f"{old} is deprecated since raytf {SINCE} and goes in {GOES}: {new}", DeprecationWarning,
                  stacklevel=stacklevel)


def renamed_keyword(old: str, new: str) -> Callable[[F], F]:
    """`fn(old=value)`, 0.1's keyword, taken as `fn(new=value)` with a DeprecationWarning (0.1's fit, sweep and
    scaling took their config as `cfg=`)."""
    def decorate(fn: F) -> F:
        @functools.wraps(fn)
        def call(*args: Any, **kwargs: Any) -> Any:
            if old in kwargs:
                if new in kwargs or args:
                    raise TypeError(f"raytf.{fn.__name__}(): give the config once, as {new}= (not {old}= too)")
                warn(f"raytf.{fn.__name__}({old}=...)", f"use raytf.{fn.__name__}({new}=...)")
                kwargs[new] = kwargs.pop(old)
            return fn(*args, **kwargs)

        return call  # type: ignore[return-value]

    return decorate
