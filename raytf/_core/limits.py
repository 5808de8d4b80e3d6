"""What a task, or the program it runs, may send: caps on its output lines, on what one push of output carries,
on the stderr tail an error quotes, on its metric names and on its pushes in flight (raytf issue 19). Pure.

The caps are what the driver and result.json hold; the task's log file on disk always has everything."""

from __future__ import annotations

import collections
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from raytf.errors import RaytfError

# A task's output line longer than this is shown (streamed, quoted in an error) cut, with a note saying how many
# bytes were left out: a progress bar that never ends its line, or a tensor printed whole, is still one line.
MAX_LINE_BYTES = 64 * 1024
# What one push of streamed output carries (a push every 0.2 s): lines beyond either cap are counted, not sent.
MAX_FLUSH_LINES = 2000
MAX_FLUSH_BYTES = 256 * 1024
# The last stderr lines a failed script's error quotes (the message, its traceback in result.json): by lines
# and by bytes, so 20 long lines do not make a result.json of megabytes.
TAIL_LINES = 20
TAIL_BYTES = 8 * 1024
# A JSON line on a script's events pipe: a metrics row or a checkpoint sync is a few KiB at most.
MAX_EVENT_LINE_BYTES = 1024 * 1024
# A training function's error message and traceback, as result.json keeps them (the exception's text can be
# anything: a tensor, a whole dataset's repr).
MAX_ERROR_BYTES = 64 * 1024
# Event pushes a task has in flight to the bus: past it, the next push waits for the oldest to land.
MAX_INFLIGHT_PUSHES = 64
# Pushes a task sends as its events come, one event each; past them, events wait for a push to land and then go
# together, as one push (Nagle's rule). The bus pays per call (~0.6 ms of its CPU each, whatever it carries), so
# 512 ranks sending a row every 100 ms one call each outran it (1,565 rows/s taken of 5,120; raytf issue 38): a
# bus that is behind now gets fewer, bigger pushes, and an idle one gets every event at once.
EAGER_PUSHES = 1
# What one push of waiting events carries at most: past either, the batch goes without waiting for a push to land.
# Well under what the bus holds of one rank between two drains (events.MAX_EVENTS_PER_RANK / MAX_BYTES_PER_RANK).
MAX_BATCH_EVENTS = 256
MAX_BATCH_BYTES = 1024 * 1024


def cut_note(cut: int) -> str:
    return f" …[raytf: {cut} more bytes not shown; all of it is in the task's log]"


def clip(text: str, max_bytes: int, *, keep_end: bool = False) -> str:
    """`text` in at most `max_bytes` (UTF-8, the note included): its head (or its end) and a note saying how
    much was left out."""
    data = text.encode(errors="replace")
    if len(data) <= max_bytes:
        return text
    keep = max(0, max_bytes - len(cut_note(len(data)).encode()))
    note = cut_note(len(data) - keep)
    if keep_end:
        return note.lstrip() + "\n" + data[len(data) - keep:].decode(errors="ignore")
    return data[:keep].decode(errors="ignore") + note


class LineCutter:
    """Splits a byte stream into lines, holding at most `max_line` bytes of the line under way: the rest of a
    longer line is counted, never kept, so however long a line is, reading it takes bounded memory. Pure."""

    def __init__(self, max_line: int = MAX_LINE_BYTES) -> None:
        self.max_line = max_line
        self._head = bytearray()
        self._cut = 0

    def _take(self, piece: memoryview) -> None:
        room = self.max_line - len(self._head)
        if room > 0:
            self._head += piece[:room]
        self._cut += max(0, len(piece) - max(room, 0))

    def _line(self) -> tuple[bytes, int]:
        out = (bytes(self._head), self._cut)
        self._head.clear()
        self._cut = 0
        return out

    def feed(self, chunk: bytes) -> list[tuple[bytes, int]]:
        """The lines `chunk` completes, each as (its first `max_line` bytes without the newline, bytes cut)."""
        view, out, start = memoryview(chunk), [], 0
        while (nl := chunk.find(b"\n", start)) >= 0:
            self._take(view[start:nl])
            out.append(self._line())
            start = nl + 1
        self._take(view[start:])
        return out

    def end(self) -> list[tuple[bytes, int]]:
        """The stream ended: its last line, if it did not end with a newline."""
        return [self._line()] if self._head or self._cut else []


class Tail:
    """The last lines of a stream, at most `max_lines` and `max_bytes` (UTF-8, a newline each) together; a line
    keeps at most an eighth of the budget (its head), so one long line does not push out the lines before it (a
    traceback's). Iterates oldest first. Pure."""

    def __init__(self, max_lines: int = TAIL_LINES, max_bytes: int = TAIL_BYTES) -> None:
        self.max_lines, self.max_bytes = max_lines, max_bytes
        self._lines: collections.deque[tuple[str, int]] = collections.deque()
        self.bytes = 0

    def append(self, text: str) -> None:
        text = clip(text, max(self.max_bytes // 8, 128) - 1)
        size = len(text.encode(errors="replace")) + 1
        self._lines.append((text, size))
        self.bytes += size
        while len(self._lines) > self.max_lines or self.bytes > self.max_bytes:
            self.bytes -= self._lines.popleft()[1]

    def __iter__(self) -> Iterator[str]:
        return (text for text, _ in self._lines)

    def __len__(self) -> int:
        return len(self._lines)


class TooManyMetrics(RaytfError):
    """A program reported more distinct metric names than metrics.max_names: a bug in the program (a name per
    item, per step), never retried."""


class MetricNames:
    """The distinct metric names a task reported, at most `max_names` (metrics.max_names): each is a column of
    metrics.parquet, held by the driver for the whole run. Checked on the task's side, before a row is sent."""

    def __init__(self, max_names: int) -> None:
        self.max_names = max_names
        self.seen: set[str] = set()

    def check(self, names: Iterable[str]) -> None:
        """Raises TooManyMetrics when `names` would take the count past the cap (nothing of them is counted)."""
        new = [n for n in dict.fromkeys(names) if n not in self.seen]
        if not new:
            return
        if len(self.seen) + len(new) > self.max_names:
            shown = ", ".join(repr(n if len(n) <= 40 else n[:40] + "…") for n in new[:3])
            raise TooManyMetrics(
                f"metrics.max_names: the program reported {len(self.seen) + len(new)} distinct metric names, more "
                f"than metrics.max_names={self.max_names} (new ones: {shown}{', ...' if len(new) > 3 else ''}); "
                f"each name is a column of metrics.parquet. Fix: report one name per quantity, not one per item or "
                f"step (a mean over classes, say; the details in a file under $RAYTF_LOG_DIR), or raise "
                f"metrics.max_names")
        self.seen.update(new)


class Inflight:
    """A task's event pushes still in flight, at most `cap`: past it, a new push first waits (up to `wait_s`)
    for the oldest to land, so a task that sends faster than the bus takes them slows to its pace instead of
    piling requests up. `wait(refs, num_returns, timeout) -> (ready, not_ready)` is `ray.wait`. Pure."""

    def __init__(self, wait: Callable[[list, int, float], tuple[list, list]], cap: int = MAX_INFLIGHT_PUSHES,
                 wait_s: float = 10.0) -> None:
        self._wait, self.cap, self.wait_s = wait, cap, wait_s
        self.refs: list = []

    def room(self) -> bool:
        """Whether one more push may go now (after waiting up to wait_s for room)."""
        if len(self.refs) >= self.cap:
            _, self.refs = self._wait(self.refs, len(self.refs), 0)
        if len(self.refs) >= self.cap:
            _, self.refs = self._wait(self.refs, len(self.refs) - self.cap + 1, self.wait_s)
        return len(self.refs) < self.cap

    def reap(self) -> None:
        """Forgets the pushes that landed, without waiting."""
        if self.refs:
            _, self.refs = self._wait(self.refs, len(self.refs), 0)

    def add(self, ref) -> None:
        self.refs.append(ref)

    def take(self) -> list:
        """Every push in flight, for the caller to wait on; none is tracked any more."""
        refs, self.refs = self.refs, []
        return refs


class Outbox:
    """A task's events on their way to the bus, in the order they came. An event goes at once, as a push of its
    own, while fewer than `eager` pushes are in flight (a bus keeping up: no delay); otherwise it joins the
    pending batch, which goes as one push as soon as a push lands or it holds `max_events` events or `max_bytes`
    (`size(event)`) -- a full batch first waits for room under the Inflight cap, and a bus that took none for
    wait_s gets it without its `droppable` events (counted in `dropped`).

    No timer: `put` and `landed` return a push in flight for the caller to watch (or None), and the caller calls
    `landed(that push)` once it has landed. `send(events) -> ref` pushes; `wait` is Inflight's. Not thread-safe
    (the caller holds a lock). Pure."""

    def __init__(self, send: Callable[[list], Any], wait: Callable[[list, int, float], tuple[list, list]], *,
                 droppable: Callable[[Any], bool], size: Callable[[Any], int], eager: int = EAGER_PUSHES,
                 cap: int = MAX_INFLIGHT_PUSHES, max_events: int = MAX_BATCH_EVENTS,
                 max_bytes: int = MAX_BATCH_BYTES, wait_s: float = 10.0) -> None:
        if not 1 <= eager <= cap:
            raise ValueError(f"Outbox: eager={eager} must be from 1 to cap={cap}")
        self._send, self._droppable, self._size = send, droppable, size
        self.eager, self.max_events, self.max_bytes = eager, max_events, max_bytes
        self.inflight = Inflight(wait, cap, wait_s)
        self.pending: list = []
        self._pending_bytes = 0
        self.watch: Any = None  # the push in flight whose landing sends the pending batch
        self.dropped = 0  # droppable events not sent while the bus took none for wait_s
        self.pushes = 0

    def put(self, event) -> Any:
        """Sends `event` or holds it; returns a push for the caller to watch (then call `landed`), or None."""
        refs = self.inflight
        if self.watch is None:  # nothing waits for a landing: does the bus keep up?
            if len(refs.refs) >= self.eager:
                refs.reap()
            if len(refs.refs) < self.eager:
                if self.pending:
                    self.pending.append(event)
                    self._send_pending()
                else:
                    self._push([event])
                return None
        # Behind: the watched push's landing sends the batch (no look at the bus per event: a ray.wait each was
        # most of what a report cost a process speaking for many ranks).
        self.pending.append(event)
        self._pending_bytes += self._size(event)
        if len(self.pending) >= self.max_events or self._pending_bytes >= self.max_bytes:
            self._send_pending()
            return None
        return self._arm()

    def landed(self, ref) -> Any:
        """`ref`, a push `put` or `landed` returned, landed: the pending batch goes now (or, were the cap reached
        by full batches meanwhile, when another push lands: that one is returned, to watch)."""
        if self.watch is None or ref != self.watch:  # the batch it was armed for went already (full, or flushed)
            return None
        self.watch = None
        if not self.pending:
            return None
        self.inflight.reap()
        if len(self.inflight.refs) < self.inflight.cap:
            self._send_pending()
            return None
        return self._arm()

    def take(self) -> list:
        """Sends the pending batch (room or not: the caller waits for every push next), then returns every push
        in flight; none is tracked any more."""
        if self.pending:
            batch, self.pending, self._pending_bytes = self.pending, [], 0
            self._push(batch)
        self.watch = None
        return self.inflight.take()

    def _arm(self) -> Any:
        if self.watch is not None or not self.inflight.refs:
            return None
        # The oldest: the first to land, as one caller's calls to an actor start in the order they were made.
        self.watch = self.inflight.refs[0]
        return self.watch

    def _send_pending(self) -> None:
        batch, self.pending, self._pending_bytes, self.watch = self.pending, [], 0, None
        if not self.inflight.room():
            kept = [e for e in batch if not self._droppable(e)]
            self.dropped += len(batch) - len(kept)
            batch = kept
        if batch:
            self._push(batch)

    def _push(self, events: list) -> None:
        self.inflight.add(self._send(events))
        self.pushes += 1
