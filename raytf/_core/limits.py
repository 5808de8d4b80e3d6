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
# A task's events go to the bus one push in flight at a time (EventOutbox: in order); while one is in flight, those
# that come wait and then go together, as one push (Nagle's rule). The bus pays per call (~0.6 ms of its CPU
# each, whatever it carries), so 512 ranks sending a row every 100 ms one call each outran it (1,565 rows/s taken
# of 5,120; raytf issue 38): a bus that is behind now gets fewer, bigger pushes, and an idle one gets every event
# at once. What one push of waiting events carries at most: past either, the task waits for its push to land.
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


class EventOutbox:
    """A task's events on their way to the bus, in the order they came, with at most one push in flight: Ray runs
    a threaded actor's calls (the bus is one) in no guaranteed order, so a second push sent before the first
    landed could overtake it (seen here: a batch that went through the object store was overtaken by the small
    one after it; https://docs.ray.io/en/latest/ray-core/actors/task-orders.html). An event goes at once when no
    push is in flight (a bus keeping up: no delay); otherwise it joins the pending batch, which goes as one push
    when the push in flight lands (Nagle's rule: the bus pays per call, raytf issue 38). A batch that reaches
    `max_events` or `max_bytes` (`size(event)`) makes the caller wait for that landing, up to `wait_s` (the task
    slows to the bus' pace); if the bus took nothing meanwhile, the batch's `droppable` events are dropped
    (counted in `dropped`) and the rest wait on.

    No timer: `put`, `landed` and `take` return the push just sent for the caller to watch (or None), and the
    caller calls `landed(that push)` once it has landed (a push that failed has landed too). `send(events) ->
    ref` pushes; `wait(refs, num_returns, timeout) -> (ready, not_ready)` is `ray.wait`. Not thread-safe (the
    caller holds a lock). Pure."""

    def __init__(self, send: Callable[[list], Any], wait: Callable[[list, int, float], tuple[list, list]], *,
                 droppable: Callable[[Any], bool], size: Callable[[Any], int], max_events: int = MAX_BATCH_EVENTS,
                 max_bytes: int = MAX_BATCH_BYTES, wait_s: float = 10.0) -> None:
        self._send, self._wait, self._droppable, self._size = send, wait, droppable, size
        self.max_events, self.max_bytes, self.wait_s = max_events, max_bytes, wait_s
        self.inflight: Any = None  # the push in flight, None when the last one landed
        self.pending: list = []
        self._pending_bytes = 0
        self.dropped = 0  # droppable events not sent while the bus took nothing for wait_s
        self.pushes = 0

    def put(self, event) -> Any:
        """Sends `event` or holds it; returns a push for the caller to watch (then call `landed`), or None."""
        if self.inflight is None:
            return self._push([event])
        self.pending.append(event)
        self._pending_bytes += self._size(event)
        if len(self.pending) < self.max_events and self._pending_bytes < self.max_bytes:
            return None
        ready, _ = self._wait([self.inflight], 1, self.wait_s)
        if ready:
            return self._push_pending()
        kept = [e for e in self.pending if not self._droppable(e)]
        self.dropped += len(self.pending) - len(kept)
        self.pending, self._pending_bytes = kept, sum(self._size(e) for e in kept)
        return None

    def landed(self, ref) -> Any:
        """`ref`, a push this outbox returned to watch, landed: the pending batch goes now (returned, to watch)."""
        if ref is not self.inflight:  # one that a full batch or a flush had waited for already
            return None
        self.inflight = None
        return self._push_pending() if self.pending else None

    def take(self, timeout: float) -> tuple[Any, Any]:
        """For a flush: what waits goes once the push in flight landed (waiting up to `timeout`; past it, it goes
        anyway: a flush is a task's last word). Returns (the push to wait for or None, a new push to watch or
        None)."""
        if not self.pending:
            return self.inflight, None
        if self.inflight is not None:
            self._wait([self.inflight], 1, timeout)
        sent = self._push_pending()
        return sent, sent

    def _push_pending(self) -> Any:
        batch, self.pending, self._pending_bytes = self.pending, [], 0
        return self._push(batch)

    def _push(self, events: list) -> Any:
        self.inflight = self._send(events)
        self.pushes += 1
        return self.inflight
