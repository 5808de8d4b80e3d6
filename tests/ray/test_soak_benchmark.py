"""`python -m benchmarks.soak --smoke`: the soak benchmark runs (~25 s of training on its own Ray) and reports its
three targets; its run leaves nothing in the temporary directories (that one holds even in a short run)."""

import pytest

from tests.conftest import benchmark_smoke

pytestmark = [pytest.mark.ray]


@pytest.mark.bench  # a benchmark's smoke, its own Ray: ~1 min here
@pytest.mark.timeout(720)
def test_soak_benchmark_smoke_mode_runs():
    out = benchmark_smoke("benchmarks.soak", timeout_s=700).stdout
    assert "run: succeeded" in out and "checkpoints committed" in out, out
    assert "| driver |" in out and "| rank 0 |" in out and "| rank 1 |" in out, out
    assert "commit latency: first third" in out, out
    assert "zero leftovers: yes" in out, out
