"""The scale benchmark's smoke mode (benchmarks/scale.py): raytf's task group on a simulated cluster beside Ray's
bare actors, and the driver's intake of ranks reporting through raytf's own emitter and bus; both tables print."""

import pytest

from tests.conftest import benchmark_smoke


# The slow step, with the other benchmarks' smokes: its own simulated cluster, then its own Ray; no TensorFlow.
@pytest.mark.slow
@pytest.mark.timeout(300)
def test_scale_benchmark_smoke_mode_runs():
    out = benchmark_smoke("benchmarks.scale", timeout_s=280)
    rows = [line.split("|") for line in out.stdout.splitlines() if line.startswith("| 8 |")]
    assert len(rows) == 2, out.stdout  # one row of each table
    orchestration, intake = rows
    assert float(orchestration[5]) > 0, out.stdout  # all addressed, seconds
    offered, taken, coalesced = int(intake[2]), int(intake[3]), int(intake[4])
    # 8 ranks at 10 rows a second: nothing the bus had to coalesce, every row offered taken.
    assert coalesced == 0 and taken == offered > 0, out.stdout
