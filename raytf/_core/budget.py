"""What one launch may retry, each counted apart against its own limit: failures, preemptions and elastic resizes;
and the recycles of tasks whose memory grew (counted, not limited: _core/memory.py). Pure."""

from __future__ import annotations

from dataclasses import dataclass

from raytf._core import failure
from raytf.config import Config


@dataclass
class FailureBudget:
    """What one launch may retry, each counted apart against its own limit (-1: none): failures
    (failure.max_failures), preemptions (failure.max_preemptions) and elastic resizes
    (cluster.elastic.max_resizes); and the recycles of tasks whose memory grew past failure.max_task_rss_gb (no
    limit: each needs the memory to have grown, _core/memory.py)."""

    max_failures: int
    max_preemptions: int = -1
    max_resizes: int = 0
    failures: int = 0
    preemptions: int = 0
    resizes: int = 0
    recycles: int = 0

    @classmethod
    def of(cls, cfg: Config) -> FailureBudget:
        return cls(cfg.failure.max_failures, cfg.failure.max_preemptions, cfg.cluster.elastic.max_resizes)

    def may_resize(self) -> bool:
        """A flapping host cannot make the group resize forever: at most cluster.elastic.max_resizes a launch."""
        return self.resizes < self.max_resizes

    def charge(self, kind: str) -> None:
        """A retry of a failure of `kind` (a resize is counted when the size changes: `Run.placed`)."""
        if kind in (failure.PREEMPTED, failure.DRAIN):
            self.preemptions += 1
        elif kind == failure.RECYCLE:
            self.recycles += 1
        elif kind != failure.RESIZE:
            self.failures += 1

    def to_json(self) -> dict[str, int]:
        return {"failures": self.failures, "max_failures": self.max_failures, "preemptions": self.preemptions,
                "max_preemptions": self.max_preemptions, "resizes": self.resizes, "max_resizes": self.max_resizes,
                "recycles": self.recycles}
