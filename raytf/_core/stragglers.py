"""Stragglers, pure: a rank whose step time, input wait, compute or save time stays above the other ranks'.

Under synchronous training (MultiWorkerMirroredStrategy) every rank's step takes as long as the slowest rank's:
the others wait for it in the all-reduce. So the step time does not say who is slow; the breakdown does (see
raytf/_core/breakdown.py). The slow rank's own part is long (its input wait, or its compute), and the ranks waiting
for it show the wait as collective_s, which is therefore never blamed. A rank is a straggler on a part when that
part, in every one of its last `window` step rows, is more than `ratio` times the median of the other ranks' rows
(those of its role, in their last `window` rows) and longer by at least `floor` of a step (noise in a part that is
a sliver of the step is no finding). Compute is judged only where the all-reduce is timed (collective_s):
without it, the waiting ranks' compute would hold their wait.

A rank that is slow, then not, then slow again in the same attempt is one finding, counted in `episodes`: on a
loaded machine a rank near the ratio flapped dozens of times a minute, each time a new finding, a warning and an
entry of result.json (raytf issue 33's soak). Its return is said again only after `QUIET_WINDOWS` windows of rows
in line.
"""

from __future__ import annotations

import bisect
import statistics
from collections import deque
from dataclasses import dataclass, field

from raytf._core.breakdown import COLLECTIVE, COMPUTE, INPUT_WAIT, SAVE, STEP_TIME

# The parts a rank can be slow in, and what the report calls each.
PARTS = {INPUT_WAIT: "input", COMPUTE: "compute", SAVE: "save", STEP_TIME: "step"}
# Windows of rows a finding must have been over before its rank's return to slow is said again (else it is only
# counted, in the finding's `episodes`).
QUIET_WINDOWS = 10
WHAT = {"input": "waits for its input", "compute": "computes (the model's work, its Python, callbacks)",
        "save": "writes checkpoints", "step": "steps"}


@dataclass
class Finding:
    """One rank found slow on one part; `last_step` moves on while it stays so, `over` once it no longer is."""

    rank: int
    role: str
    host: str
    part: str
    value_s: float  # the rank's median of the part over its window (s/step)
    others_s: float  # the other ranks' median (s/step)
    attempt: int
    step: int  # where it was first found
    last_step: int
    over: bool = False
    episodes: int = 1  # how often, in its attempt, it became slow (again)
    rows_in_line: int = field(default=0, compare=False)  # its rank's rows judged since it was last over
    since: int | None = field(default=None, compare=False)  # where its latest turn to slow began (None: `step`)
    said: bool = field(default=True, compare=False)  # its latest turn to slow was said (so is its end)

    @property
    def ratio(self) -> float:
        return self.value_s / self.others_s if self.others_s > 0 else float("inf")

    def to_json(self) -> dict:
        ratio = self.ratio
        return {"rank": self.rank, "role": self.role, "host": self.host, "part": self.part,
                "value_s": round(self.value_s, 6), "others_s": round(self.others_s, 6),
                "ratio": round(ratio, 3) if ratio != float("inf") else None, "attempt": self.attempt,
                "step": self.step, "last_step": self.last_step, "episodes": self.episodes}

    def line(self, ratio_key: float) -> str:
        times = f"{self.ratio:.1f}x" if self.ratio != float("inf") else "far more"
        # Slow again after a long while in line (said again): since when this time, and how often since first found.
        since = (f"since step {self.step}" if self.since is None else
                 f"again since step {self.since}, slow {self.episodes} times since step {self.step}")
        return (f"straggler: {self.role} {self.rank} on {self.host or '?'} {WHAT[self.part]} {_ms(self.value_s)} a "
                f"step, the other ranks {_ms(self.others_s)} ({times}, {since}; "
                f"metrics.straggler_ratio {ratio_key:g}): every rank waits for it")


def _ms(seconds: float) -> str:
    ms = 1000 * seconds
    return f"{ms:.1f} ms" if ms >= 1 else f"{ms:.2f} ms"


@dataclass
class _Rank:
    role: str
    rows: dict[str, deque] = field(default_factory=dict)  # part -> its last `window` values
    collective: bool = False  # its rows time the all-reduce (collective_s)


class _Pool:
    """Every full window of one role's ranks for one part, as one sorted list: the median of the *other* ranks'
    values is then found in O(window + log n) per row, not by gathering and sorting n ranks' windows for each of
    them (which made the driver's straggler watch quadratic in the number of ranks: ~1 ms a row at 512 ranks)."""

    def __init__(self) -> None:
        self.values: list[float] = []

    def add(self, value: float) -> None:
        bisect.insort(self.values, value)

    def remove(self, value: float) -> None:
        del self.values[bisect.bisect_left(self.values, value)]

    def median_without(self, own: deque | tuple) -> float | None:
        """statistics.median of the pool less `own` (values that are in it), None when nothing is left."""
        n = len(self.values) - len(own)
        if n <= 0:
            return None
        # Where own's values sit in the pool (equal values take successive places), in order.
        places, taken = [], {}
        for v in sorted(own):
            i = bisect.bisect_left(self.values, v) + taken.get(v, 0)
            taken[v] = taken.get(v, 0) + 1
            places.append(i)

        def kth(k: int) -> float:  # the k-th smallest (from 0) of the pool without `places`
            i = k
            for p in places:
                if p <= i:
                    i += 1
            return self.values[i]

        return kth(n // 2) if n % 2 else (kth(n // 2 - 1) + kth(n // 2)) / 2


class Stragglers:
    """Fed every step row of the attempt under way (`add`); says what changed (a new finding, one that is over).

    `floor`: how much longer than the others' a part must be, as a share of their median step time."""

    def __init__(self, ratio: float, window: int, floor: float = 0.05) -> None:
        self.ratio, self.window, self.floor = ratio, window, floor
        self.findings: list[Finding] = []  # every one of the run, in the order found
        self._ranks: dict[int, _Rank] = {}
        self._pools: dict[tuple[str, str], _Pool] = {}  # (role, part) -> the ranks' full windows
        self._open: dict[tuple[int, str], Finding] = {}
        self._closed: dict[tuple[int, str], Finding] = {}  # the attempt's findings that are over, to reopen
        self._attempt: int | None = None

    def add(self, *, attempt: int, rank: int, role: str, host: str, step: int,
            metrics: dict[str, float]) -> list[Finding]:
        if attempt != self._attempt:  # a new attempt: new processes, maybe other hosts and sizes
            for f in self._open.values():
                f.over = True
            self._ranks, self._pools, self._open, self._closed, self._attempt = {}, {}, {}, {}, attempt
        r = self._ranks.setdefault(rank, _Rank(role))
        r.collective = r.collective or metrics.get(COLLECTIVE) is not None
        for part in PARTS:
            if metrics.get(part) is not None:
                self._push(r, part, float(metrics[part]))
        return self._judge(rank, host, step, attempt)

    def _push(self, r: _Rank, part: str, value: float) -> None:
        """The value joins the rank's window; a full window is in its role's pool (only full ones count)."""
        rows = r.rows.setdefault(part, deque(maxlen=self.window))
        pool = self._pools.setdefault((r.role, part), _Pool())
        if len(rows) == self.window:
            pool.remove(rows[0])
            pool.add(value)
            rows.append(value)
            return
        rows.append(value)
        if len(rows) == self.window:
            for v in rows:
                pool.add(v)

    def _others_median(self, rank: int, part: str) -> float | None:
        """The median of the other ranks' (of its role) full windows of `part`, None without any."""
        r = self._ranks[rank]
        pool = self._pools.get((r.role, part))
        if pool is None:
            return None
        mine = r.rows.get(part, ())
        return pool.median_without(mine if len(mine) == self.window else ())

    def _judge(self, rank: int, host: str, step: int, attempt: int) -> list[Finding]:
        r = self._ranks[rank]
        changes = []
        scale = self._others_median(rank, STEP_TIME) or 0.0
        for part, name in PARTS.items():
            mine = r.rows.get(part)
            if mine is None or len(mine) < self.window:
                continue
            typical = self._others_median(rank, part)
            if typical is None:
                continue
            if part == COMPUTE and not r.collective:
                # Without the all-reduce's own time, a rank's compute holds its wait for the slow one: the ranks
                # that wait would look slowest.
                continue
            slow = min(mine) > self.ratio * typical and min(mine) - typical >= self.floor * scale
            found = self._open.get((rank, name))
            closed = self._closed.get((rank, name))
            if slow and found is None and closed is not None:  # slow again: the same finding, once more
                found = self._open[(rank, name)] = self._closed.pop((rank, name))
                quiet = found.rows_in_line >= QUIET_WINDOWS * self.window
                found.over, found.episodes, found.rows_in_line, found.said = False, found.episodes + 1, 0, quiet
                found.value_s, found.others_s, found.last_step = statistics.median(mine), typical, step
                found.since = step
                if quiet:  # back after a long while in line: news again
                    changes.append(found)
            elif slow and found is None:
                found = Finding(rank, r.role, host, name, statistics.median(mine), typical, attempt, step, step)
                self._open[(rank, name)] = found
                self.findings.append(found)
                changes.append(found)
            elif slow:
                found.value_s, found.others_s, found.last_step = statistics.median(mine), typical, step
            elif closed is not None:
                closed.rows_in_line += 1
            elif found is not None and max(mine) <= self.ratio * typical:  # all its window back in line
                found.over = True
                self._closed[(rank, name)] = self._open.pop((rank, name))
                if found.said:  # (a flapping rank's every turn is not news: counted in `episodes`)
                    changes.append(found)
        return changes

    def to_json(self) -> list[dict]:
        return [f.to_json() for f in self.findings]
