"""The driver's metrics table: one row per reported (rank, step) from every task, as Arrow/Parquet.

Rows arrive as dicts and are kept as Arrow tables once taken for writing (`take_new`): a flush writes only the
rows since the last one, so its cost does not grow with the run; `to_arrow` gives the whole table.

A run that reports every step for days must not hold all its rows in the driver (issue 33's soak: ~200 B a row,
+10 % of the driver's RSS in 30 minutes). Tables the storage holds (`stored`: a part written, or the earlier
launches' table read from it) stay in memory only up to `memory_bytes`; beyond it the oldest go, and `to_arrow`
reads the stored rows back (`read_stored`, from the run directory) and adds those only memory has."""

from __future__ import annotations

from collections.abc import Callable

import pyarrow as pa

from raytf._core import events as ev

# Fixed columns first, then one float64 column per metric name (null where a row lacks it).
# `fit`: which Model.fit call of the attempt's program the row came from (1, 2, ...; null outside Keras fit).
# `num_workers`: the size of the attempt the row came from (elastic training changes it between attempts; null in
# rows of launches that did not record it).
BASE_COLUMNS = ("run", "attempt", "rank", "role", "kind", "epoch", "step", "time", "fit", "num_workers")
_BASE_TYPES = {"run": pa.string(), "attempt": pa.int64(), "rank": pa.int64(), "role": pa.string(),
               "kind": pa.string(), "epoch": pa.int64(), "step": pa.int64(), "time": pa.float64(),
               "fit": pa.int64(), "num_workers": pa.int64()}


def rows_to_arrow(rows: list[dict]) -> pa.Table:
    """Rows in the order they happened (a task's events can reach the threaded bus out of order)."""
    metric_names = sorted({k for r in rows for k in r} - set(BASE_COLUMNS))
    fields = [pa.field(c, _BASE_TYPES[c]) for c in BASE_COLUMNS]
    fields += [pa.field(m, pa.float64()) for m in metric_names]
    rows = sorted(rows, key=lambda r: r["time"])
    return pa.table({f.name: [r.get(f.name) for r in rows] for f in fields}, schema=pa.schema(fields))


def concat(tables: list[pa.Table]) -> pa.Table:
    """Tables whose metric columns differ, as one (missing columns null), fixed columns first, by time."""
    tables = [t for t in tables if t.num_columns]
    if not tables:
        return rows_to_arrow([])
    whole = pa.concat_tables(tables, promote_options="default")
    metrics = sorted(set(whole.column_names) - set(BASE_COLUMNS))
    whole = whole.select([c for c in BASE_COLUMNS if c in whole.column_names] + metrics)
    import pyarrow.compute as pc  # (here: ~80 ms a task process, that never sorts metrics, need not pay)

    return whole.take(pc.sort_indices(whole, sort_keys=[("time", "ascending")])) if whole.num_rows else whole


# Stored rows kept in memory besides storage: ~20,000 rows of a few metrics. A short run never reads back.
MEMORY_BYTES = 4 << 20


class MetricsTable:
    """`previous`: the earlier launches' rows, read from storage. `read_stored`: every row storage holds of this run
    (the previous ones and each table passed to `stored`); without it every row stays in memory."""

    def __init__(self, run: str, previous: pa.Table | None = None, *,
                 read_stored: Callable[[], pa.Table] | None = None, memory_bytes: int | None = None) -> None:
        self.run = run
        self._read_stored = read_stored
        self._memory_bytes = MEMORY_BYTES if memory_bytes is None else memory_bytes
        # In order; each with whether storage has it too (the earlier launches' table has: it was read from there).
        self._tables: list[tuple[pa.Table, bool]] = [(previous, True)] if previous is not None and previous.num_rows \
            else []
        self._dropped = 0  # stored rows no longer in memory (to_arrow reads them back)
        self._whole: pa.Table | None = None  # to_arrow's, until a row arrives (the run's end asks several times)
        self._new: list[dict] = []
        self._spill()
        self._last_epoch: dict[int, dict] = {}  # rank -> its last epoch row (final metrics)
        self._last_step: dict[int, dict] = {}  # rank -> its last step row (final metrics of a run without epochs)
        self._sizes: dict[int, int] = {}  # attempt number -> its workers (set_size)
        if self._tables:
            import pyarrow.compute as pc

            for row in previous.filter(pc.equal(previous["kind"], ev.EPOCH)).to_pylist():
                self._note(row, self._last_epoch)
            if not self._last_epoch:
                for row in previous.filter(pc.equal(previous["kind"], ev.STEP)).to_pylist():
                    self._note(row, self._last_step)

    @staticmethod
    def _note(row: dict, last: dict[int, dict]) -> None:
        key = (row["attempt"], row["step"], row["epoch"])
        mine = last.get(row["rank"])
        if mine is None or key >= (mine["attempt"], mine["step"], mine["epoch"]):
            last[row["rank"]] = row

    def set_size(self, attempt: int, workers: int) -> None:
        """Attempt `attempt` (its number across launches, as events carry it) trains with `workers` workers: its
        rows carry it in the `num_workers` column, also those added before this call and not yet taken."""
        self._sizes[attempt] = workers
        for row in self._new:
            if row["attempt"] == attempt:
                row["num_workers"] = workers

    def add(self, event: ev.Event) -> dict | None:
        if event.kind not in (ev.STEP, ev.EPOCH, ev.EVAL):
            return None
        p = event.payload
        row = {"run": self.run, "attempt": event.attempt, "rank": event.rank, "role": event.role,
               "kind": event.kind, "epoch": int(p.epoch), "step": int(p.step), "time": event.time,
               "fit": p.fit, "num_workers": self._sizes.get(event.attempt)}
        for k, v in p.metrics.items():
            row[k if k not in _BASE_TYPES else f"metric_{k}"] = float(v)
        self._new.append(row)
        self._whole = None
        if event.kind == ev.EPOCH:
            self._note(row, self._last_epoch)
        elif event.kind == ev.STEP and not self._last_epoch:
            self._note(row, self._last_step)
        return row

    @property
    def dirty(self) -> bool:
        """Rows arrived since the last `take_new`."""
        return bool(self._new)

    def __len__(self) -> int:
        return self._dropped + sum(t.num_rows for t, _ in self._tables) + len(self._new)

    def take_new(self) -> pa.Table:
        """The rows since the last call, as a table (kept, and from now on no longer new)."""
        table = rows_to_arrow(self._new)
        self._new = []
        if table.num_rows:
            self._tables.append((table, False))
        return table

    def stored(self, table: pa.Table) -> None:
        """`table` (from `take_new`) is in storage now: memory may let it go."""
        self._tables = [(t, kept or t is table) for t, kept in self._tables]
        self._spill()

    def all_stored(self) -> None:
        """Every row is in storage now (the whole table written)."""
        self.take_new()
        self._tables = [(t, True) for t, _ in self._tables]
        self._spill()

    def _spill(self) -> None:
        if self._read_stored is None:
            return
        held = sum(t.nbytes for t, kept in self._tables if kept)
        while held > self._memory_bytes:
            i = next(i for i, (_, kept) in enumerate(self._tables) if kept)  # the oldest stored one
            table, _ = self._tables.pop(i)
            held -= table.nbytes
            self._dropped += table.num_rows

    def to_arrow(self) -> pa.Table:
        self.take_new()
        if self._whole is None:
            if self._dropped:  # storage has all the stored rows; memory adds the ones only it has
                tables = [self._read_stored(), *(t for t, kept in self._tables if not kept)]
            else:
                tables = [t for t, _ in self._tables]
            self._whole = concat(tables)
        return self._whole

    def final(self, rank: int = 0) -> dict[str, float]:
        """The last epoch row of `rank` (else of any rank) as {metric: value}; in a run of no epoch rows (a custom
        loop's raytf.report steps, a script's tf.summary scalars), its last step row."""
        rows = self._last_epoch or self._last_step
        if not rows:
            return {}
        last = rows.get(rank) or max(rows.values(), key=lambda r: (r["attempt"], r["step"], r["epoch"]))
        out = {k: v for k, v in last.items() if k not in BASE_COLUMNS and v is not None}
        out["epoch"], out["step"] = last["epoch"], last["step"]
        return out
