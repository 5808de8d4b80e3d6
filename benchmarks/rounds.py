"""Interleaved rounds, shared by the benchmarks that compare contenders side by side: round n runs them in order,
round n+1 in reverse, so a drift of the machine (another process, a warming cache) weighs on both alike."""

from __future__ import annotations

import statistics
from collections.abc import Callable


def interleaved(rounds: int, contenders: list[str], one: Callable[[str, int], dict]) -> list[dict]:
    """`one(contender, round)` for each contender, `rounds` times, alternating the order; each row printed as it
    comes (a long benchmark shows its progress), all returned."""
    rows = []
    for n in range(rounds):
        for c in (contenders if n % 2 == 0 else contenders[::-1]):
            row = one(c, n)
            rows.append(row)
            print(f"round {n + 1}/{rounds} {c}: " + " ".join(
                f"{k}={v:.3f}" if isinstance(v, float) else f"{k}={v}" for k, v in row.items()
                if k not in ("contender", "round")), flush=True)
    return rows


def medians(rows: list[dict], contender: str) -> dict[str, float]:
    """The median of each number in `contender`'s rows (the round's number and non-numbers left out)."""
    mine = [r for r in rows if r["contender"] == contender]
    keys = [k for k, v in mine[0].items() if k != "round" and isinstance(v, (int, float)) and not isinstance(v, bool)]
    return {k: statistics.median(r[k] for r in mine) for k in keys}


def paired(rows: list[dict], a: str, a_key: str, b: str, b_key: str) -> list[float]:
    """Round by round, `b`'s `b_key` less `a`'s `a_key`: a difference of two runs minutes apart at most, which the
    machine's drift between rounds (the scatter of the totals themselves) does not reach."""
    by = {(r["contender"], r["round"]): r for r in rows}
    both = sorted(n for (c, n) in by if c == a and (b, n) in by)
    return [by[b, n][b_key] - by[a, n][a_key] for n in both]
