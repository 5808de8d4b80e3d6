"""Interleaved rounds, shared by the benchmarks that compare contenders side by side: round n runs them in order,
round n+1 in reverse, so a drift of the machine (another process, a warming cache) weighs on both alike."""

from __future__ import annotations

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
