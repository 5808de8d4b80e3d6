"""`MetricsStore`: a run's metrics table, appended in parts while the run goes (`metrics.parts/`, one Parquet file
per flush) and compacted into `metrics.parquet` at the run's end."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import pyarrow as pa

from raytf._core import metrics

if TYPE_CHECKING:
    from raytf._storage.rundir import RunDir

METRICS_FILE = "metrics.parquet"
METRICS_PARTS_DIR = "metrics.parts"  # while a run goes: one Parquet file per flush (see MetricsStore.append)
METRICS_PARTS_KEY = b"raytf.parts"  # metrics.parquet's schema metadata: the parts it already includes


class MetricsStore:
    """The metrics table of one run directory (`RunDir.metrics`)."""

    def __init__(self, run_dir: RunDir) -> None:
        self.rd = run_dir

    def _parts(self) -> list[str]:
        return sorted(i.base_name for i in self.rd.listing(METRICS_PARTS_DIR) if i.base_name.endswith(".parquet"))

    def append(self, table: pa.Table, part: str, *, retry: bool = True) -> None:
        """The rows since the last flush as one more part: a flush costs what it adds, not the whole run."""
        self.rd.write_table(f"{METRICS_PARTS_DIR}/{part}.parquet", table, retry=retry)

    def write(self, table: pa.Table, *, retry: bool = True) -> None:
        """metrics.parquet, the whole table (it includes every part there now, and says so), then the parts go.
        A reader that finds both skips the parts metrics.parquet names."""
        parts = self._parts()
        meta = {**(table.schema.metadata or {}), METRICS_PARTS_KEY: json.dumps(parts).encode()}
        self.rd.write_table(METRICS_FILE, table.replace_schema_metadata(meta), retry=retry)
        for name in parts:
            self.rd.remove(f"{METRICS_PARTS_DIR}/{name}")  # (one left: metrics.parquet names it, readers skip it)

    def exists(self) -> bool:
        return self.rd.exists(METRICS_FILE) or bool(self._parts())

    def clear(self) -> None:
        """No table: metrics.parquet and its parts go (a launch that starts a run afresh)."""
        for name in self._parts():
            self.rd.remove(f"{METRICS_PARTS_DIR}/{name}")
        self.rd.remove(METRICS_FILE)

    def read(self, skip: frozenset[str] | set[str] = frozenset()) -> pa.Table:
        """metrics.parquet plus the parts it does not include (a run still going, or a driver that died), but for
        the parts named in `skip` (a write that raised: its rows may be there or not; the writer still has them)."""
        tables, included = [], set()
        if self.rd.exists(METRICS_FILE):
            table = self.rd.read_table(METRICS_FILE)
            included = set(json.loads((table.schema.metadata or {}).get(METRICS_PARTS_KEY, b"[]")))
            tables.append(table.replace_schema_metadata(None))
        for name in self._parts():
            if name not in included and name not in skip:
                tables.append(self.rd.read_table(f"{METRICS_PARTS_DIR}/{name}"))
        return metrics.concat(tables)
