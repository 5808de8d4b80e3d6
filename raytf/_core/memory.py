"""How much memory a task may grow to before the run recycles it (failure.max_task_rss_gb), pure.

A MultiWorkerMirroredStrategy task grows by ~10 KiB of native memory each time it runs its train function
(tensorflow#42616, with or without raytf: ~10.5 KiB a step, +60 % RSS over raytf issue 52's 30-minute soak),
until Ray's memory monitor kills it (at 95 % of the node's memory, its own and everyone's) and the steps since the
last checkpoint are lost. The run instead watches each task's resident memory (the `rss_gib` column of its step
rows) and, past the limit, saves at an agreed step and restarts its tasks in fresh processes (raytf issue 52): a
recycle, counted in result.json's `budget.recycles`, never against failure.max_failures.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field

from raytf._core import breakdown
from raytf._core import events as ev
from raytf._core.attempt_record import Recycle

log = logging.getLogger("raytf")

# With failure.max_task_rss_gb unset, the run's tasks on a node may together use this share of its memory (the
# rest is Ray's own processes and object store, the driver, the page cache; Ray's monitor kills at 0.95).
NODE_SHARE = 0.8
# A task past its limit is recycled only if it grew by at least this share of the limit since its first sample in
# the attempt: a fresh process would start that much lower. One that started near the limit (a large model) is
# not recycled (a warning says so): a fresh one would be as big.
MIN_GROWTH = 0.25
# A group past its limit again within this long of its restart after a recycle is not leaking slowly (a cache
# filling up, a model that needs more than the limit): recycling it again would restart it every few minutes.
MIN_INTERVAL_S = 600.0


@dataclass(frozen=True)
class TaskMemory:
    """What the limit of one task is derived from: its rank, its node, what its role reserves
    (cluster.<role>.memory_gb, GiB; None: nothing) and its node's memory as its process sees it (GiB; None: not
    known there)."""

    rank: int
    node: str
    reserved_gib: float | None
    node_gib: float | None


def rss_limits(setting: float | None, tasks: Iterable[TaskMemory]) -> dict[int, float]:
    """Rank -> the resident memory (GiB) past which the task is recycled. `setting`: failure.max_task_rss_gb; 0
    turns recycling off ({}); None derives each task's limit: what its role reserves, else NODE_SHARE of its node's
    memory shared among the run's tasks on that node (a task whose node's memory is unknown has no limit)."""
    tasks = list(tasks)
    if setting is not None:
        return {t.rank: float(setting) for t in tasks} if setting > 0 else {}
    on_node: dict[str, int] = {}
    for t in tasks:
        on_node[t.node] = on_node.get(t.node, 0) + 1
    limits = {}
    for t in tasks:
        if t.reserved_gib:
            limits[t.rank] = float(t.reserved_gib)
        elif t.node_gib:
            limits[t.rank] = round(NODE_SHARE * t.node_gib / on_node[t.node], 3)
    return limits


def worth_recycling(rss_gib: float, start_gib: float, limit_gib: float) -> bool:
    """Whether a task past its limit would come back from a recycle much smaller (see MIN_GROWTH)."""
    return rss_gib > limit_gib and rss_gib - start_gib >= MIN_GROWTH * limit_gib


@dataclass
class MemoryWatch:
    """One attempt's tasks' memory against their limits: `limits` (rss_limits; none: nothing is watched), and
    `recycle_from`, the time before which no recycle is asked (MIN_INTERVAL_S into an attempt that follows one)."""

    limits: dict[int, float]
    recycle_from: float | None = None
    _start: dict[int, float] = field(default_factory=dict)  # rank -> its first rss_gib sample in the attempt
    _said: set[int] = field(default_factory=set)  # ranks past their limit that are not recycled (said once)

    def observe(self, e: ev.Event, now: float) -> Recycle | None:
        """A step row: the recycle it calls for (its rank's `rss_gib` past the limit, with room to win back), else
        None."""
        limit = self.limits.get(e.rank)
        rss = e.payload.metrics.get(breakdown.RSS) if limit is not None else None
        if rss is None:
            return None
        rss = float(rss)
        start = self._start.setdefault(e.rank, rss)
        if rss <= limit:
            return None
        too_soon = self.recycle_from is not None and now < self.recycle_from
        if not too_soon and worth_recycling(rss, start, limit):
            log.warning("%s %d uses %.2f GiB (it started this attempt at %.2f GiB), past failure.max_task_rss_gb "
                        "(%g GiB for it): TensorFlow's memory grows as it trains (tensorflow#42616)", e.role,
                        e.rank, rss, start, limit)
            return Recycle(e.rank, e.role, rss, limit, start, int(e.payload.step), now)
        if e.rank not in self._said:
            self._said.add(e.rank)
            why = (f"the group was recycled less than {MIN_INTERVAL_S:.0f}s ago (not a slow leak)" if too_soon
                   else f"it started this attempt at {start:.2f} GiB (a fresh process would not be much smaller)")
            log.warning("%s %d uses %.2f GiB, past failure.max_task_rss_gb (%g GiB for it), but is not recycled: "
                        "%s; raise failure.max_task_rss_gb, or set it to 0 to turn recycling off", e.role, e.rank,
                        rss, limit, why)
        return None
