"""The scale benchmark's smoke mode (benchmarks/scale.py): raytf's task group on a simulated cluster beside Ray's
bare actors, the driver's intake of ranks reporting through raytf's own emitter and bus, and 2 MWMS workers trained
through raytf; the three tables print."""

import pytest

from tests.conftest import benchmark_smoke


# With the other benchmarks' smokes: its own simulated cluster, then its own Ray twice.
@pytest.mark.bench
@pytest.mark.timeout(420)
def test_scale_benchmark_smoke_mode_runs():
    out = benchmark_smoke("benchmarks.scale", timeout_s=400)
    rows = [line.split("|") for line in out.stdout.splitlines() if line.startswith("| 8 |")]
    assert len(rows) == 2, out.stdout  # one row of each table
    orchestration, intake = rows
    assert float(orchestration[5]) > 0, out.stdout  # all addressed, seconds
    offered, taken, coalesced = int(intake[2]), int(intake[3]), int(intake[4])
    # 8 ranks at 10 rows a second: nothing the bus had to coalesce, every row offered taken.
    assert coalesced == 0 and taken == offered > 0, out.stdout
    trained = [line.split("|") for line in out.stdout.splitlines() if line.startswith("| 2 |")]
    assert len(trained) == 1, out.stdout
    raytf_first, raytf_step = float(trained[0][3]), float(trained[0][6])  # (the smoke hand-launches nothing)
    assert raytf_first > 0 and raytf_step > 0 and trained[0][2].strip() == "—", out.stdout
