"""A task's output (a training function's process's own stdout and stderr, a script's pipes alike): all of it into
its per-rank log file, the lines the driver shows sent to it as OUTPUT events. No Ray, no TensorFlow."""

from __future__ import annotations

import logging
import os
import sys
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, BinaryIO

from raytf._core import events as ev
from raytf._core import limits
from raytf._task.lines import AbortNoise, Shown, benign, display
from raytf.errors import RaytfError

if TYPE_CHECKING:
    from raytf._storage import RunDir

log = logging.getLogger(__name__)


FLUSH_S = 0.2  # how often the lines shown are sent to the driver
CHUNK = 65536  # bytes read from a stream at a time


class TaskOutput:
    """What a task's output streams become, whoever reads them (`OutputCapture`: a training function's process's
    own; `ScriptHost`: a script's pipes): every byte into the task's log file; the lines the driver shows
    (`lines.Shown`) sent as OUTPUT events by `flush()`; the last stderr lines, for an error's message.

    A stream is read a chunk at a time, not a line at a time: a progress bar redraws with carriage returns and ends
    its line only at the end of an epoch, and each redraw is a sign of life (`take_active`). Memory stays bounded
    whatever is printed (raytf issue 19): the log gets the bytes as they come (a line at a time while lines are
    short, so that stdout's and stderr's interleave by line), everything else sees each line cut at
    limits.MAX_LINE_BYTES; a push carries at most limits.MAX_FLUSH_LINES/MAX_FLUSH_BYTES (the rest is counted);
    the stderr tail is limits.TAIL_LINES/TAIL_BYTES."""

    def __init__(self, log_file: BinaryIO | None, emit: Callable[[str, dict], None], shown: Shown, *,
                 log_name: str = "the task's log") -> None:
        self.log_file, self.emit, self.shown, self.log_name = log_file, emit, shown, log_name
        self.stderr_tail = limits.Tail()
        self._abort = AbortNoise()
        self._lock = threading.Lock()
        self._lines: list[list[str]] = []
        self._line_bytes = 0  # of the lines held for the next flush
        self._dropped = 0
        self._active = False  # output since take_active()

    def read(self, read: Callable[[], bytes], stream: str) -> None:
        """Reads one stream ("out" or "err") until `read()` returns b"" (EOF). Never stops before: a pipe nobody
        drains blocks every print of the program (and TF's C++ logging), which would look like a hang."""
        cutter = limits.LineCutter()
        held = b""  # the log's bytes of the line under way, until it ends or passes limits.MAX_LINE_BYTES
        while chunk := read():
            with self._lock:
                self._active = True
            end = chunk.rfind(b"\n") + 1
            if end:
                self._log(held + chunk[:end])
                held = chunk[end:]
            else:
                held += chunk
            if len(held) > limits.MAX_LINE_BYTES:
                self._log(held)
                held = b""
            for head, cut in cutter.feed(chunk):
                self._line(head, cut, stream)
        self._log(held)
        for head, cut in cutter.end():
            self._line(head, cut, stream)

    def _log(self, data: bytes) -> None:
        """Into the task's log file; a log that fails (a full disk) is given up, with a line to the driver saying
        so (not through `logging`: in a function's process that writes to the very pipe being read)."""
        log_file = self.log_file
        if not data or log_file is None:
            return
        try:
            view = memoryview(data)
            while view:
                view = view[log_file.write(view):]
        except (OSError, ValueError) as e:  # ValueError: the file was closed under us
            self.log_file = None
            with self._lock:
                self._hold([["err", f"[raytf: {self.log_name} is no longer written: {e}]"]])

    def _line(self, head: bytes, cut: int, stream: str) -> None:
        text = display(head) + (limits.cut_note(cut) if cut else "")
        with self._lock:
            if stream == "err" and not benign(text):
                self.stderr_tail.append(text)
            if self.shown(stream, text):
                self._hold(self._abort.feed(stream, text))

    def _hold(self, lines: list[list[str]]) -> None:
        """Held for the next flush, up to limits.MAX_FLUSH_LINES and MAX_FLUSH_BYTES; past them, counted."""
        for line in lines:
            size = len(line[1].encode(errors="replace")) + 16
            if len(self._lines) < limits.MAX_FLUSH_LINES and self._line_bytes + size <= limits.MAX_FLUSH_BYTES:
                self._lines.append(line)
                self._line_bytes += size
            else:
                self._dropped += 1

    def flush(self) -> None:
        """The lines held, to the driver in one push."""
        with self._lock:
            lines, self._lines, self._line_bytes = self._lines, [], 0
            dropped, self._dropped = self._dropped, 0
        if dropped:
            lines.append(["err", f"[raytf: {dropped} lines not streamed (more than a push carries: too many, or too "
                                 f"long); all are in the task's log]"])
        if lines:
            self.emit(ev.OUTPUT, ev.Output(lines=lines))

    def take_active(self) -> bool:
        """Whether anything was printed since the last call."""
        with self._lock:
            active, self._active = self._active, False
        return active

    def tick(self, done: threading.Event, then: Callable[[], None] | None = None) -> None:
        """Until `done` is set: `flush()`, then `then()`, every FLUSH_S."""
        while not done.wait(FLUSH_S):
            self.flush()
            if then is not None:
                then()

    def end(self, ok: bool) -> None:
        """The program ended (`ok`: it succeeded): TF's abort lines held back go too if it failed; the last push."""
        with self._lock:
            self._hold(self._abort.end(ok))
        self.flush()


def open_log(path: str):
    """The task's log file for appending, unbuffered. Never through a symlink: a run directory others can write
    to could point the log at a file of this user's (O_NOFOLLOW; raytf issue 19)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o644)
    except OSError:
        if os.path.islink(path):
            raise RaytfError(f"{path} is a symlink: a task log is never written through one (a planted link "
                             f"would redirect it). Fix: remove it") from None
        raise
    return os.fdopen(fd, "ab", buffering=0)


class OutputCapture:
    """This process's stdout and stderr (fds 1 and 2: Python prints and TF's C++ logs alike) through a `TaskOutput`:
    every byte into the per-rank log file, the lines `shown` to the driver. Nothing goes on to Ray's own capture:
    with ray.log_to_driver (a user's own ray.init leaves it on) Ray would print it all on the driver again, each
    line under `(TaskActor pid=...)` and de-duplicated across ranks (raytf issue 21).

    On a local run directory the file is written in place (readable while the run goes); on an object
    store it is written locally and uploaded by `close()`."""

    def __init__(self, run_dir: RunDir, rel: str, emit: Callable[[str, dict], None], shown: Shown) -> None:
        self.run_dir, self.rel = run_dir, rel
        self.log = run_dir.staged(rel, is_dir=False, prefix="raytf-log-")
        self.path = self.log.path
        self.file = open_log(self.path)
        self.output = TaskOutput(self.file, emit, shown, log_name=f"the task's log {run_dir.uri_of(rel)}")
        self._originals: list[tuple[int, int]] = []
        self._readers: list[threading.Thread] = []
        for fd, stream in ((1, "out"), (2, "err")):
            sys.stdout.flush() if fd == 1 else sys.stderr.flush()
            read_end, write_end = os.pipe()
            self._originals.append((fd, os.dup(fd)))
            os.dup2(write_end, fd)
            os.close(write_end)
            t = threading.Thread(target=self._read, args=(read_end, stream), daemon=True, name=f"raytf-tee-{fd}")
            t.start()
            self._readers.append(t)
        self._done = threading.Event()
        self._ticker = threading.Thread(target=self.output.tick, args=(self._done,), daemon=True,
                                        name="raytf-tee-flush")
        self._ticker.start()

    def _read(self, read_end: int, stream: str) -> None:
        try:
            self.output.read(lambda: os.read(read_end, CHUNK), stream)
        finally:
            os.close(read_end)

    def close(self, ok: bool = True, log_only: str = "") -> None:
        """Back to Ray's fds; the last lines pushed (`ok`: the program succeeded); `log_only` written to the log
        alone, after all the output (a failure's whole traceback, which the driver shows in brief); the log closed
        (and uploaded)."""
        sys.stdout.flush()
        sys.stderr.flush()
        for fd, original in self._originals:
            os.dup2(original, fd)  # closes the pipe's last write end (unless a child process holds it): EOF
            os.close(original)
        self._originals = []
        for t in self._readers:
            t.join(timeout=5)
        self._done.set()
        self._ticker.join()
        self.output.end(ok)
        if log_only:
            self.output._log(log_only.encode(errors="replace"))
        self.file.close()
        # Streamed (the log may be far larger than this process should hold); not retried: the task is ending.
        self.log.close(retry=False, what="task log")
