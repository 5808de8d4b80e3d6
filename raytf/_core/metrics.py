"""The driver's metrics table: one row per reported (rank, step) from every task, as Arrow/Parquet."""

from __future__ import annotations

import pyarrow as pa

from raytf._core import events as ev

# Fixed columns first, then one float64 column per metric name (null where a row lacks it).
BASE_COLUMNS = ("run", "attempt", "rank", "role", "kind", "epoch", "step", "time")
_BASE_TYPES = {"run": pa.string(), "attempt": pa.int64(), "rank": pa.int64(), "role": pa.string(),
               "kind": pa.string(), "epoch": pa.int64(), "step": pa.int64(), "time": pa.float64()}


class MetricsTable:
    def __init__(self, run: str, previous: pa.Table | None = None) -> None:
        self.run = run
        self.rows: list[dict] = previous.to_pylist() if previous is not None else []
        self._dirty = False

    def add(self, event: ev.Event) -> dict | None:
        if event.kind not in (ev.STEP, ev.EPOCH, ev.EVAL):
            return None
        p = event.payload
        row = {"run": self.run, "attempt": event.attempt, "rank": event.rank, "role": event.role,
               "kind": event.kind, "epoch": int(p["epoch"]), "step": int(p["step"]), "time": event.time}
        for k, v in p.get("metrics", {}).items():
            row[k if k not in _BASE_TYPES else f"metric_{k}"] = float(v)
        self.rows.append(row)
        self._dirty = True
        return row

    @property
    def dirty(self) -> bool:
        return self._dirty

    def to_arrow(self) -> pa.Table:
        self._dirty = False
        metric_names = sorted({k for r in self.rows for k in r} - set(BASE_COLUMNS))
        fields = [pa.field(c, _BASE_TYPES[c]) for c in BASE_COLUMNS]
        fields += [pa.field(m, pa.float64()) for m in metric_names]
        schema = pa.schema(fields)
        # In the order they happened: a task's events can reach the (threaded) bus out of order.
        rows = sorted(self.rows, key=lambda r: r["time"])
        columns = {f.name: [r.get(f.name) for r in rows] for f in fields}
        return pa.table(columns, schema=schema)

    def final(self, rank: int = 0) -> dict[str, float]:
        """The last epoch row of `rank` (else of any rank) as {metric: value}."""
        epochs = [r for r in self.rows if r["kind"] == ev.EPOCH]
        mine = [r for r in epochs if r["rank"] == rank] or epochs
        if not mine:
            return {}
        last = max(mine, key=lambda r: (r["attempt"], r["step"], r["epoch"]))
        out = {k: v for k, v in last.items() if k not in BASE_COLUMNS and v is not None}
        out["epoch"], out["step"] = last["epoch"], last["step"]
        return out
