"""The Ray Data vs tf.data benchmark's smoke mode (benchmarks/data.py): both contenders run and the table prints."""

import pytest

from tests.conftest import benchmark_smoke


# With the other benchmarks' smokes: ~50 s here (its own Ray, two runs of 2 TensorFlow workers).
@pytest.mark.bench
@pytest.mark.timeout(300)
def test_data_benchmark_smoke_mode_runs():
    """`python -m benchmarks.data --smoke`: one short run each way; both succeed and read the same steps."""
    out = benchmark_smoke("benchmarks.data", timeout_s=280)
    rows = {line.split("|")[1].strip(): line for line in out.stdout.splitlines() if line.startswith("| ")}
    assert rows["tfdata"].rstrip(" |").endswith("1/1") and rows["raydata"].rstrip(" |").endswith("1/1"), out.stdout
    steps = {name: rows[name].split("|")[-3].strip() for name in ("tfdata", "raydata")}
    assert steps["tfdata"] == steps["raydata"] == "16", out.stdout  # 1024 rows / global batch 64 per epoch
    assert "raydata ÷ tfdata" in out.stdout
