"""Lists said briefly at any scale (raytf issue 54: a plan of 512 workers printed 512 rows and a cluster spec of 512
entries on one line): the first few of a list then how many more, a run of ranks as a span, identical rows as one.
Pure."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import TypeVar

T = TypeVar("T")

FEW = 5  # items named before "and N more"


def few(items: Iterable[object], n: int = FEW) -> str:
    """`a, b, c, d, e and 7 more`: the first `n` of `items`, then how many were left unsaid."""
    items = [str(x) for x in items]
    if len(items) <= n:
        return ", ".join(items)
    return f"{', '.join(items[:n])} and {len(items) - n} more"


def spans(numbers: Iterable[int]) -> str:
    """Integers as runs: `0-3, 7, 8, 10-511` (sorted; three or more consecutive ones as first-last)."""
    out: list[str] = []
    values = sorted(set(numbers))
    i = 0
    while i < len(values):
        j = i
        while j + 1 < len(values) and values[j + 1] == values[j] + 1:
            j += 1
        out += [str(v) for v in values[i:j + 1]] if j - i < 2 else [f"{values[i]}-{values[j]}"]
        i = j + 1
    return ", ".join(out)


def runs(items: Sequence[T], key: Callable[[T], Hashable]) -> list[list[T]]:
    """`items` cut into runs of consecutive ones with the same `key`."""
    out: list[list[T]] = []
    for item in items:
        if out and key(out[-1][-1]) == key(item):
            out[-1].append(item)
        else:
            out.append([item])
    return out
