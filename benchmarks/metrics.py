"""The driver's metrics flush, at 10k and 1M rows: the whole table rewritten (raytf before issue 17) against the
rows since the last flush appended as a part (now), plus the one compaction at the run's end.

Run:  python -m benchmarks.metrics [--sizes 10000,1000000] [--new-rows 1000] [--repeats 3]

Rows: 8 fixed columns and 3 metrics, as a 2-worker run reporting every step writes them; local storage (a
temporary directory), so the numbers are the driver's own CPU and bytes, not a network's.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import tempfile
import time

from raytf._core import events as ev
from raytf._core.metrics import MetricsTable, rows_to_arrow
from raytf._storage import METRICS_FILE, RunDir


def _events(n: int, start: int = 0):
    for i in range(start, start + n):
        yield ev.Event(ev.STEP, "worker", i % 2, 1, {"epoch": 1 + i // 1000, "step": i // 2,
                                                      "metrics": {"loss": 1.0 / (i + 1), "acc": 0.5, "lr": 0.01}},
                       time=float(i))


def measure(size: int, new_rows: int, repeats: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="raytf-bench-metrics-") as tmp:
        rd = RunDir(tmp, "r")
        rd.makedirs()
        table = MetricsTable("r")
        for e in _events(size):
            table.add(e)
        table.take_new()  # everything so far already flushed
        all_rows = table.to_arrow().to_pylist()  # what the old flush rebuilt from, every time
        batches = [list(_events(new_rows, size + r * new_rows)) for r in range(repeats)]
        old, new = [], []
        for batch in batches:  # before: rebuild every row, rewrite the whole file
            t = time.perf_counter()
            rows = all_rows + [{"run": "r", "attempt": e.attempt, "rank": e.rank, "role": e.role, "kind": e.kind,
                                "epoch": e.payload["epoch"], "step": e.payload["step"], "time": e.time,
                                **e.payload["metrics"]} for e in batch]
            rd.write_table(METRICS_FILE, rows_to_arrow(rows))
            old.append(time.perf_counter() - t)
        del all_rows, rows  # the old way's Python rows would slow everything after them (the GC walks them)
        gc.collect()
        for r, batch in enumerate(batches):  # now: the new rows, appended as a part
            t = time.perf_counter()
            for e in batch:
                table.add(e)
            rd.metrics.append(table.take_new(), f"bench-{r:06d}")
            new.append(time.perf_counter() - t)
        t = time.perf_counter()
        rd.metrics.write(table.to_arrow())
        compact = time.perf_counter() - t
        size_mib = rd.fs.get_file_info(rd.path(METRICS_FILE)).size / 2**20
    return {"rows": size, "old_s": statistics.median(old), "new_s": statistics.median(new), "compact_s": compact,
            "file_mib": size_mib}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.metrics", description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="10000,1000000")
    ap.add_argument("--new-rows", type=int, default=1000, help="rows arriving between two flushes")
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args(argv)
    results = [measure(int(n), a.new_rows, a.repeats) for n in a.sizes.split(",")]
    print(f"flush of {a.new_rows} new rows, median of {a.repeats}; local storage\n")
    print("| rows in the run | whole rewrite (before) s | append a part (now) s | ratio | final compaction s | "
          "metrics.parquet MiB |")
    print("|---|---|---|---|---|---|")
    for r in results:
        print(f"| {r['rows']:,} | {r['old_s']:.3f} | {r['new_s']:.4f} | {r['old_s'] / r['new_s']:.0f}x | "
              f"{r['compact_s']:.2f} | {r['file_mib']:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
