"""How long to wait before trying a failing call again: doubling from a first wait, up to a cap. The one rule the
storage retries (_storage/rundir.py) and the tracking sender (_core/tracking_outbox.py's `Backoff`) wait by. Pure."""

from __future__ import annotations

import math


def delay(failures: int, first_s: float, max_s: float = math.inf) -> float:
    """The wait after `failures` failures in a row (1: the first): `first_s`, doubling, at most `max_s`."""
    if failures < 1:
        return 0.0
    return min(max_s, first_s * 2 ** (failures - 1))
