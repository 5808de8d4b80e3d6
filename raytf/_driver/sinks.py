"""The driver's sinks for the tasks' events (`Sinks`, the set the driver feeds): live progress (a tqdm bar per epoch
on a terminal or in a notebook, log lines otherwise) and TensorBoard event files for every rank's scalars
(tensorboardX: no TensorFlow); also Ray's metrics (_driver/raymetrics.py) and the caller's `on_event`."""

from __future__ import annotations

import logging
import os
import re
import sys
import threading
import time
from collections.abc import Callable

from raytf._core import events as ev
from raytf._core.breakdown import is_timing
from raytf._storage import RunDir

log = logging.getLogger("raytf")


class Sinks:
    """The run's event sinks, in order. A sink is a callable taking each event; it may also have `poll()` (once per
    round of the attempt loop) and `close()` (at the run's end: every sink's is tried, see RunRecord.end)."""

    def __init__(self, *sinks: Callable[[ev.Event], None]) -> None:
        self.sinks = list(sinks)

    def add(self, sink: Callable[[ev.Event], None]) -> None:
        self.sinks.append(sink)

    def __call__(self, e: ev.Event) -> None:
        for sink in self.sinks:
            sink(e)

    def poll(self) -> None:
        for sink in self.sinks:
            if hasattr(sink, "poll"):
                sink.poll()

    def closing(self) -> tuple[Callable[[], None], ...]:
        return tuple(sink.close for sink in self.sinks if hasattr(sink, "close"))

    def close(self) -> None:
        for close in self.closing():
            close()


class Progress:
    """Rank 0's steps and epochs as a progress bar (or log lines); the tasks' streamed output above it."""

    def __init__(self, *, epochs: int | None, steps_per_epoch: int | None, batch_size: int | None,
                 quiet: bool = False, rank: int = 0) -> None:
        self.epochs = epochs
        self.steps_per_epoch = steps_per_epoch
        self.batch_size = batch_size  # per replica
        self.replicas = 1
        self.rank = rank
        # A terminal, or a notebook (tqdm.auto draws a widget there).
        self.bars = not quiet and (sys.stderr.isatty() or "ipykernel" in sys.modules)
        self._bar = None
        self._epoch = None
        self.fit: int | None = None  # the Model.fit under way (a script's, or a function's later ones)
        self._base = (0, 0)  # (epochs, steps) counted before it, by the program's earlier fits
        self._drops_told: set[int] = set()  # attempts whose dropped events were reported
        self._size = ""  # elastic training: `2/3 workers`, the attempt's size of the size wanted

    def start_attempt(self, workers: int, *, wanted: int, min_workers: int, batch_size: int | None = None) -> None:
        """At each attempt's start: its `workers` of the `wanted` ones, shown (`epoch 3/5 · 2/3 workers`) when the
        run is elastic (`min_workers` below `wanted`); its per-replica `batch_size` when it has its own (elastic
        training keeping the global batch), for examples/s. A new size starts a new bar and counts the replicas
        in sync afresh."""
        size = f"{workers}/{wanted} workers" if min_workers < wanted else ""
        if size != self._size:
            self._size = size
            self.replicas = 1  # the attempt's tasks tell theirs as they start
            self._close()  # the bar under way says the old size
            self._epoch = None
        if batch_size is not None and self.batch_size is not None:  # (a script's batch is its own: none)
            self.batch_size = batch_size

    def _label(self, epoch: int, at: str = "") -> str:
        """`epoch 3/5`, in the fit's own count: `fit 2 · epoch 1/2` for a program's second Model.fit; then `at`
        (` step 30`), then the size when elastic: `epoch 3/5 step 30 · 2/3 workers`."""
        label = f"epoch {epoch - self._base[0]}" + (f"/{self.epochs}" if self.epochs else "")
        label = (f"fit {self.fit} · {label}" if (self.fit or 1) > 1 else label) + at
        return f"{label} · {self._size}" if self._size else label

    def _in_epoch(self, epoch: int, step: int) -> int:
        """Steps done in epoch `epoch` (1-based, the run's count) at global step `step`."""
        return max(0, min(self.steps_per_epoch, step - self._base[1] - (epoch - 1 - self._base[0])
                          * self.steps_per_epoch))

    def _open(self, epoch: int, step: int) -> None:
        from tqdm.auto import tqdm

        self._close()
        self._epoch = epoch
        self._bar = tqdm(total=self.steps_per_epoch, desc=self._label(epoch), unit="step",
                         leave=True, dynamic_ncols=True)
        if self.steps_per_epoch:
            self._bar.n = self._in_epoch(epoch, step)
            self._bar.refresh()

    def _close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    def __call__(self, e: ev.Event) -> None:
        if e.kind == ev.OUTPUT:
            self.output(e)
            return
        if e.kind == ev.DROPPED:
            self.dropped(e)
            return
        if e.kind == ev.STARTED:
            p = e.payload
            self.replicas = max(self.replicas, int(p.replicas) or 1)
            if e.rank == self.rank and p.epochs is not None:  # a script's Model.fit began (or a function's later one)
                self.epochs, self.steps_per_epoch = p.epochs, p.steps_per_epoch
                self.fit = p.fit
                self._base = (int(p.base_epoch or 0), int(p.base_step or 0))
            return
        if e.kind not in (ev.EVAL, ev.STEP, ev.EPOCH):  # (the rest carry no metrics: beats, commits, busy ranks)
            return
        p = e.payload
        metrics = p.metrics
        if e.kind == ev.EVAL:
            log.info("evaluator, checkpoint of epoch %d step %d: %s", p.epoch, p.step,
                     " ".join(f"{k}={v:.4g}" for k, v in metrics.items()))
            return
        if e.rank != self.rank:
            return
        shown = {k: f"{v:.4g}" for k, v in metrics.items() if not is_timing(k)}  # the model's own, not the breakdown
        if "steps_per_s" in metrics and not self.batch_size:
            shown["steps/s"] = f"{metrics['steps_per_s']:.3g}"
        elif "steps_per_s" in metrics:
            shown["ex/s"] = f"{metrics['steps_per_s'] * self.batch_size * self.replicas:.0f}"
        if e.kind == ev.STEP and self.bars:
            if self._epoch != p.epoch:
                self._open(p.epoch, p.step)
            if self.steps_per_epoch:
                self._bar.n = self._in_epoch(p.epoch, p.step)
            else:
                self._bar.n = p.step
            self._bar.set_postfix(shown, refresh=True)
        elif e.kind == ev.EPOCH:
            if self._bar is not None:
                if self.steps_per_epoch:
                    self._bar.n = self.steps_per_epoch
                self._bar.set_postfix(shown, refresh=True)
                self._close()
                self._epoch = None
            # (A script that reports epochs without counting steps has none to show.)
            at = f" step {p.step}" if p.step else ""
            log.info("%s: %s", self._label(p.epoch, at), " ".join(f"{k}={v}" for k, v in shown.items()))

    def dropped(self, e: ev.Event) -> None:
        """The bus could not keep all of a rank's events (see events.COALESCED): said once per attempt."""
        if e.attempt in self._drops_told:
            return
        self._drops_told.add(e.attempt)
        log.warning("attempt %d: %s %d sends events faster than the driver takes them; the event bus dropped %d of "
                    "its step rows (not in metrics.parquet or TensorBoard) and %d of its output lines (all are in "
                    "its log), and drops more of them while it goes on (said once). Fix: report less often "
                    "(metrics.every_steps; raytf.report once every few dozen steps), print less",
                    e.attempt, e.role, e.rank, e.payload.steps, e.payload.output_lines)

    def output(self, e: ev.Event) -> None:
        """A task's streamed stdout/stderr lines (a function's or a script's), prefixed with role and rank, above the
        progress bar."""
        prefix = f"[{e.role} {e.rank}] "
        for stream, text in e.payload.lines:
            out = sys.stderr if stream == "err" else sys.stdout
            if self._bar is not None:
                from tqdm.auto import tqdm

                tqdm.write(prefix + text, file=out)
            else:
                print(prefix + text, file=out, flush=True)

    def close(self) -> None:
        self._close()


TENSORBOARD_DIR = "tensorboard"
_TAG_REFUSED = re.compile(r"[^-/\w\.]")  # tensorboardX's (summary._INVALID_TAG_CHARACTERS)


class TensorBoardSink:
    """`<run>/tensorboard/<role><rank>/`: step metrics under `step/`, epoch metrics under `epoch/` (at the
    epoch's last step, so resumed attempts continue the same curve), the evaluator's under `eval/`.

    On a local run directory the files are written in place (TensorBoard can watch them live); on an object
    store they are written locally and uploaded when `close()` is called."""

    def __init__(self, run_dir: RunDir) -> None:
        self.run_dir = run_dir
        self.files = run_dir.staged(TENSORBOARD_DIR, is_dir=True, prefix="raytf-tb-")
        self.root = self.files.path
        self.writers: dict[str, object] = {}
        self._flushed = time.monotonic()
        self.failed = False  # a write failed (a full disk): no more are tried
        self._tags: dict[tuple[str, str], str] = {}

    FLUSH_S = 5.0

    def _writer(self, name: str):
        # tensorboardX's synchronous EventsWriter, not its SummaryWriter: that one logs through a
        # multiprocessing.Queue and a thread, and after a Ctrl-C in the driver its close() was seen to join
        # that thread for good (raytf issue 17: the CLI's SIGINT test hung in TensorBoardSink.close).
        if name not in self.writers:
            from tensorboardX.event_file_writer import EventsWriter

            os.makedirs(os.path.join(self.root, name), exist_ok=True)
            self.writers[name] = EventsWriter(os.path.join(self.root, name, "events"))
        return self.writers[name]

    def __call__(self, e: ev.Event) -> None:
        if e.kind not in (ev.STEP, ev.EPOCH, ev.EVAL) or self.failed:
            return
        metrics = e.payload.metrics
        if not metrics:
            return
        from tensorboardX.proto.event_pb2 import Event
        from tensorboardX.proto.summary_pb2 import Summary

        try:
            w = self._writer(f"{e.role}{e.rank}")
            # One event a row with every metric's value in it (TensorBoard reads each value as its own scalar):
            # at 512 ranks' rows an event per metric, each through tensorboardX's `scalar()` (numpy checks) and
            # its record CRCs, was 70 % of the driver loop's time (issue 38's intake benchmark).
            values = [Summary.Value(tag=self._tag(e.kind, name), simple_value=float(value))
                      for name, value in metrics.items()]
            w.write_event(Event(wall_time=e.time, step=int(e.payload.step), summary=Summary(value=values)))
            if time.monotonic() - self._flushed >= self.FLUSH_S:  # TensorBoard can watch the files live
                for writer in self.writers.values():
                    writer.flush()
                self._flushed = time.monotonic()
        except OSError as e:  # (a full disk): the files are given up, never the run; said once
            self._give_up(e)

    def _tag(self, kind: str, name: str) -> str:
        """`kind/name` as tensorboardX's `scalar()` would clean it (summary._clean_tag: what a TensorBoard tag may
        hold), once per name."""
        tag = self._tags.get((kind, name))
        if tag is None:
            tag = self._tags[(kind, name)] = _TAG_REFUSED.sub("_", f"{kind}/{name}").lstrip("/")
        return tag

    def _give_up(self, e: OSError) -> None:
        log.warning("TensorBoard files in %s are no longer written: %s", self.run_dir.uri_of(TENSORBOARD_DIR), e)
        self.failed = True

    def close_within(self, timeout_s: float) -> None:
        """`close()` (an object store's files uploaded) within `timeout_s`, and its local copy gone either way: for
        a driver about to leave by os._exit (a lost head), which no `finally` survives."""
        t = threading.Thread(target=self.close, name="raytf-tb-close", daemon=True)
        t.start()
        t.join(timeout_s)
        self.files.discard()

    def close(self) -> None:
        for w in self.writers.values():
            try:
                w.close()
            except OSError as e:  # (its last bytes: as above)
                if not self.failed:
                    self._give_up(e)
        self.files.close(publish=bool(self.writers) and not self.failed, what="TensorBoard files")
        self.writers = {}
