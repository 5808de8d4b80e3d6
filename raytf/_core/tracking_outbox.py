"""The tracking sender's state, pure: what is still to send (`TrackingOutbox`: bounded, in batches within MLflow's
limits, params and tags before metric points) and when to try again (`Backoff`: doubling up to a cap, one warning
per run), and which errors no retry mends. `_driver.tracking`'s sender thread runs them against MLflow."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field

from raytf._core import backoff
from raytf._core.tracking import Point

# MLflow's limits on one log_batch call (mlflow/utils/validation.py).
MAX_BATCH_METRICS = 1000
MAX_BATCH_PARAMS = 100
MAX_BATCH_TAGS = 100
MAX_BATCH_ENTITIES = 1000

# Metric points held while the tracker does not answer: past it the oldest go (counted, said at the end). A point
# is ~100 bytes: ~10 MB.
MAX_POINTS = 100_000


@dataclass
class Batch:
    """One log_batch call's worth (MLflow's limits per call)."""

    params: dict[str, str] = field(default_factory=dict)
    tags: dict[str, str] = field(default_factory=dict)
    points: list[Point] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.params or self.tags or self.points)


class TrackingOutbox:
    """What is still to send, in order: params and tags (the latest value of each) before metric points. Points are
    bounded (`max_points`): past it the oldest go, counted in `dropped`."""

    def __init__(self, max_points: int = MAX_POINTS) -> None:
        self.max_points = max_points
        self.params: dict[str, str] = {}
        self.tags: dict[str, str] = {}
        self.points: deque[Point] = deque()
        self.dropped = 0

    def __bool__(self) -> bool:
        return bool(self.params or self.tags or self.points)

    def __len__(self) -> int:
        return len(self.params) + len(self.tags) + len(self.points)

    def add_points(self, points: Iterable[Point]) -> None:
        self.points.extend(points)  # (NaN too: MLflow keeps it, and a diverged loss is worth seeing)
        while len(self.points) > self.max_points:
            self.points.popleft()
            self.dropped += 1

    def take(self) -> Batch:
        """The next call's batch: params and tags alone first (one bad param must not cost metrics), then points."""
        batch = Batch()
        if self.params:
            for k in list(self.params)[:MAX_BATCH_PARAMS]:
                batch.params[k] = self.params.pop(k)
            return batch
        if self.tags:
            for k in list(self.tags)[:MAX_BATCH_TAGS]:
                batch.tags[k] = self.tags.pop(k)
            return batch
        while self.points and len(batch.points) < min(MAX_BATCH_METRICS, MAX_BATCH_ENTITIES):
            batch.points.append(self.points.popleft())
        return batch

    def requeue(self, batch: Batch) -> None:
        """A batch that was not sent goes back in front (its params and tags unless newer values came)."""
        self.params = {**batch.params, **self.params}
        self.tags = {**batch.tags, **self.tags}
        self.points.extendleft(reversed(batch.points))
        while len(self.points) > self.max_points:
            self.points.popleft()
            self.dropped += 1


class Backoff:
    """When to try the tracker again after it failed: `first_s`, doubling, at most `max_s`. `failed` says True the
    first time only (one warning per run), `succeeded` True when it answers again after failing."""

    def __init__(self, first_s: float = 1.0, max_s: float = 10.0) -> None:
        self.first_s, self.max_s = first_s, max_s
        self.failures = 0  # in a row
        self.next_at = 0.0
        self.warned = False

    @property
    def down(self) -> bool:
        return self.failures > 0

    def due(self, now: float) -> bool:
        return now >= self.next_at

    def wait_s(self, now: float) -> float:
        return max(0.0, self.next_at - now)

    def failed(self, now: float) -> bool:
        self.failures += 1
        self.next_at = now + backoff.delay(self.failures, self.first_s, self.max_s)
        first, self.warned = not self.warned, True
        return first

    def succeeded(self) -> bool:
        back = self.failures > 0
        self.failures, self.next_at = 0, 0.0
        return back


# Errors MLflow answers that no retry mends (the request itself is wrong): the batch is dropped, said once.
PERMANENT_ERRORS = frozenset({"INVALID_PARAMETER_VALUE", "BAD_REQUEST", "RESOURCE_ALREADY_EXISTS",
                              "INVALID_STATE", "MALFORMED_REQUEST", "PERMISSION_DENIED", "UNAUTHENTICATED",
                              "RESOURCE_DOES_NOT_EXIST"})


def permanent(error_code: str | None) -> bool:
    """Whether an MLflow error (its `error_code`) is the request's fault, not the tracker being away."""
    return error_code in PERMANENT_ERRORS
