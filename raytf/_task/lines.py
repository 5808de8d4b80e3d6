"""A task's output lines, told apart: TensorFlow's log, raytf's own lines, the program's. Which of them the driver
shows, which an error's stderr tail quotes. Pure (raytf issue 21: a quiet terminal)."""

from __future__ import annotations

import re

# TF's log lines: absl's (C++ and absl-py: `I0000 00:00:1795495795.341762   29698 port.cc:153] ...`, the level
# first), TF's older C++ format (`2019-08-26 11:45:17.907378: I tensorflow/...cc:44] ...`) and TF's Python logger
# (`WARNING:tensorflow:...`). Until absl::InitializeLog runs, absl writes every message to stderr, whatever
# TF_CPP_MIN_LOG_LEVEL says, after a line saying so (abseil/abseil-cpp#1718): each task's start-up prints them.
_ABSL = re.compile(r"^([IWEF])\d{4} \d\d:\d\d:\d\d\S*\s+\d+ \S+:\d+\] "
                   r"|^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+: ([IWEF]) \S+:\d+\] ")
_TF_PY = re.compile(r"^(DEBUG|INFO|WARNING|ERROR):tensorflow:")
_BEFORE_INIT = "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR"
# Lines that continue a TF log line (a gRPC error's details, a deprecation's instructions).
_GOES_ON = re.compile(r"^(\s|Additional GRPC error|:UNKNOWN:|The error could be from|Instructions for updating:|$)")
# What a CPU machine's TF says at every start and means nothing: looking for CUDA (an E line that reads as a
# failure), oneDNN, a dataset it cannot optimise. Never quoted in an error's stderr tail.
_STARTUP = re.compile(r"failed call to cuInit|Could not find cuda drivers|oneDNN custom operations|"
                      r"GeneratorDatasetOp::Dataset will not be optimized")
# raytf's own lines: the task's `raytf` logger (formatted with OWN_FORMAT) and a script child's `raytf: ...`.
OWN_FORMAT = "%(levelname)s %(name)s: %(message)s"
_OWN = re.compile(r"^(DEBUG|INFO|WARNING|ERROR|CRITICAL) raytf(\.\w+)*: |^raytf: ")
# A process about to die: absl's FATAL (a failed CHECK), CPython's fatal error (a segfault's faulthandler dump).
_FATAL = re.compile(r"^Fatal Python error: ")


def tf_level(text: str) -> str | None:
    """The level of TF's log line `text` (I, W, E, F; the first letter of a Python logger's level), else None."""
    m = _ABSL.match(text)
    if m:
        return m.group(1) or m.group(2)
    m = _TF_PY.match(text)
    if m:
        return m.group(1)[0]
    return "W" if text.startswith(_BEFORE_INIT) else None


def benign(text: str) -> bool:
    """TF's INFO lines and its start-up chatter: kept in the log, never quoted in an error's stderr tail."""
    level = tf_level(text)
    return level == "I" or text.startswith(_BEFORE_INIT) or (level is not None and bool(_STARTUP.search(text)))


class Shown:
    """Which lines of a task's output the driver prints: a streamed rank's (train.stream_output) own lines, TF's
    log among them only with `tf_logs` (train.show_tf_logs); from every rank, raytf's warnings and the last words
    of a process that dies (its failed task's error and traceback reach the driver anyway, as a WorkerError).
    Call it with each line of a stream ("out", "err") in order. Pure."""

    def __init__(self, *, streamed: bool, tf_logs: bool = False) -> None:
        self.streamed, self.tf_logs = streamed, tf_logs
        self._in_tf: dict[str, bool] = {}  # per stream: the line before was TF's (what follows may continue it)
        self._then_tf: dict[str, bool] = {}  # per stream: the next line is TF's whatever it says

    def __call__(self, stream: str, text: str) -> bool:
        own = _OWN.match(text)
        if own:
            self._in_tf[stream] = False
            return self.streamed or own.group(1) in (None, "WARNING", "ERROR", "CRITICAL")
        level = tf_level(text)
        if level is None and (self._then_tf.get(stream) or (self._in_tf.get(stream) and _GOES_ON.match(text))):
            level = "+"  # it continues TF's line
        self._then_tf[stream] = level is not None and text.startswith("Instructions for updating:")
        self._in_tf[stream] = level is not None
        if level == "F" or _FATAL.match(text):
            return True
        return self.streamed and (level is None or self.tf_logs)


# What TF's collective executor prints when a peer goes away, and the lines that continue it: at the end of a run
# that succeeded, only the shutdown order (the first worker to exit closes its channels while another finishes).
_ABORT = re.compile(r"^[EW]\d{4} .*(StartAbort|Aborting RingReduce|rendezvous is aborting|tasks have crashed)")
_TF_LOG = re.compile(r"^([IWEF]\d{4} |Additional GRPC error|:UNKNOWN:|The error could be from|\s|$)")


class AbortNoise:
    """Holds shown lines back from TF's first abort message on (shown only with train.show_tf_logs), while only
    TF's log lines follow it: released when the program prints anything else (it trains on) or fails, dropped
    when it succeeds (they stay in the task's log). Pure."""

    def __init__(self, max_held: int = 200) -> None:
        self.held: list[list[str]] = []
        self.max_held = max_held  # lines held at most (TF's abort is a few dozen); past it they are counted
        self.skipped = 0

    def _release(self, last: list[list[str]]) -> list[list[str]]:
        out = self.held + ([["err", f"[raytf: {self.skipped} more lines of TF's log not shown; all are in the "
                                    f"task's log]"]] if self.skipped else []) + last
        self.held, self.skipped = [], 0
        return out

    def feed(self, stream: str, text: str) -> list[list[str]]:
        """The lines to stream now."""
        if self.held or _ABORT.match(text):
            if not self.held or _TF_LOG.match(text):
                if len(self.held) < self.max_held:
                    self.held.append([stream, text])
                else:
                    self.skipped += 1
                return []
            return self._release([[stream, text]])
        return [[stream, text]]

    def end(self, ok: bool) -> list[list[str]]:
        """The program ended: what is still held, unless it succeeded."""
        out = self._release([])
        return [] if ok else out


def display(raw: bytes) -> str:
    """A line as a terminal would show it: carriage-return updates (progress bars) keep their last state."""
    text = raw.decode(errors="replace").rstrip("\r\n")
    return text.rsplit("\r", 1)[-1]
