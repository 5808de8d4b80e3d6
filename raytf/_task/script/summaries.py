"""Script mode, the host's side: the scalars a script writes with `tf.summary` under the directories raytf gives it
($RAYTF_CHECKPOINT_DIR, $RAYTF_LOG_DIR), read as they are written (each event file from where the last read
ended) and relayed as its metrics rows while it reports none itself (raytf issue 55: orbit, the Model Garden, a
custom loop). No TensorFlow: _core/tfevents.py decodes them."""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Iterable

from raytf._core import limits, tfevents
from raytf._core.checkpoints import TF_EVENTS

log = logging.getLogger(__name__)

_READ_BYTES = 4 * 1024 * 1024  # this much of one file per read (a file of images: the rest next time)
_POLL_S = 1.0  # how often the event files are read while the script runs (and once more after it ends)


class SummaryReader:
    """Every event file under `roots`, read on from where the last `read()` ended."""

    def __init__(self, roots: Iterable[str]) -> None:
        self.roots = list(roots)
        self._offsets: dict[str, int] = {}
        self._given_up: set[str] = set()  # files that are not event files after all (tfevents.DamagedEvents)

    def read(self) -> list[tuple[int, dict[str, float]]]:
        """The scalars written since the last read: (step, {metric name: value}) in the order written, file by
        file (tfevents.metric_name: the file's folder below its root, then the tag)."""
        found: list[tuple[int, dict[str, float]]] = []
        for root in self.roots:
            for folder, _, files in os.walk(root):
                for name in sorted(files):
                    if TF_EVENTS in name:
                        path = os.path.join(folder, name)
                        prefix = os.path.relpath(folder, root)
                        found += [(step, {tfevents.metric_name(prefix, tag): v for tag, v in values.items()})
                                  for step, values in self._read_file(path)]
        return found

    def _read_file(self, path: str) -> list[tuple[int, dict[str, float]]]:
        if path in self._given_up:
            return []
        at = self._offsets.get(path, 0)
        try:
            with open(path, "rb") as f:
                f.seek(at)
                buf = f.read(_READ_BYTES)
                # A record bigger than a read (an image's) is read whole, or the file would never be read past it.
                need = tfevents.first_record_bytes(buf)
                if need is not None and len(buf) < need <= tfevents.MAX_RECORD_BYTES:
                    buf += f.read(need - len(buf))
        except OSError:  # (gone meanwhile: a writer's temporary file)
            return []
        try:
            records, used = tfevents.split_records(buf)
        except tfevents.DamagedEvents as e:
            self._given_up.add(path)
            log.warning("%s is not read further: it holds %s, not a summary writer's", path, e)
            return []
        self._offsets[path] = at + used
        out = []
        for record in records:
            try:
                got = tfevents.scalars(record)
            except Exception as e:  # (protobuf's DecodeError: one record the writer did not make; the next may be)
                log.warning("an unreadable record in %s skipped: %s", path, e)
                continue
            if got is not None:
                out.append(got)
        return out


class SummaryRelay:
    """The script's scalars as its metrics rows (`on_row(step, metrics)`, one a step: a step's once a newer one is
    seen, or the script has ended), as long as the script reports no row itself. From its first row or fit on
    (`script_counts()`), its own rows are the metrics: a TensorBoard callback's epoch_loss, say, is written at
    step = epoch. Names past metrics.max_names (`names`) are left out, said once each: the script did not ask for
    its scalars to be read, and must not fail for them."""

    def __init__(self, roots: Iterable[str], names: limits.MetricNames,
                 on_row: Callable[[int, dict[str, float]], None]) -> None:
        self._reader = SummaryReader(roots)
        self._rows = tfevents.StepRows()
        self._names, self._on_row = names, on_row
        self._lock = threading.Lock()
        self._dropped: set[str] = set()
        self.step = 0  # the newest step of a row relayed
        self.counted = False

    def script_counts(self) -> None:
        self.counted = True

    def watch(self, done: threading.Event) -> None:
        """Every _POLL_S until `done` (the script has ended), or the script counts its own steps."""
        while not done.wait(_POLL_S) and not self.counted:
            self.relay(final=False)

    def relay(self, final: bool) -> None:
        """What the script wrote since the last look; `final`: it has ended (its newest step's row goes too)."""
        with self._lock:
            if self.counted:
                return
            try:
                self._rows.add(self._reader.read())
            except Exception as e:  # (never the script's end: its summaries are a courtesy)
                log.warning("the script's tf.summary scalars could not be read: %s: %s", type(e).__name__, e)
                return
            for step, metrics in self._rows.flush() if final else self._rows.ready():
                kept = {name: value for name, value in metrics.items() if self._allowed(name)}
                if kept:
                    self.step = max(self.step, step)
                    self._on_row(step, kept)

    def _allowed(self, name: str) -> bool:
        try:
            self._names.check([name])
        except limits.TooManyMetrics as e:
            if name not in self._dropped:
                self._dropped.add(name)
                log.warning("the script's tf.summary scalar %r is not a metric of the run: %s", name, e)
            return False
        return True
