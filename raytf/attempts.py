"""The record of one attempt at training, as kept in result.json's `attempts`."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from raytf.result import RUNNING


@dataclass
class Attempt:
    """One try at training within a launch; serialised into result.json's `attempts`."""

    number: int  # across launches of the run
    index: int  # within this launch, from 1
    resumed_from: str | None = None
    started: float = field(default_factory=time.time)
    ended: float | None = None
    status: str = RUNNING
    cause: str | None = None
    error_type: str | None = None
    rank: int | None = None
    role: str | None = None
    node_id: str | None = None
    decision: str | None = None
    reason: str | None = None
    first_step_at: float | None = None
    last_step: int | None = None
    last_commit_at: float | None = None
    recovery_s: float | None = None  # previous attempt's failure -> this attempt's first step
    steps_lost: int | None = None  # steps trained in this attempt beyond what the next one resumes from
    time_lost_s: float | None = None  # training time beyond the last commit (or first step) of this attempt

    def to_json(self) -> dict[str, Any]:
        out = {k: v for k, v in self.__dict__.items() if k not in ("number", "started", "ended")}
        out.update(attempt=self.number, started_at=self.started, ended_at=self.ended,
                   duration_s=None if self.ended is None else round(self.ended - self.started, 3))
        return out
