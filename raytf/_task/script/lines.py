"""Script mode: how a script's output lines are shown. Pure: TF's noise told apart from the script's own lines."""

from __future__ import annotations

import re

# TensorFlow's C++ start-up chatter (absl INFO lines): kept in the log, left out of an error's stderr tail.
NOISE = re.compile(r"^(I\d{4} \d\d:\d\d:\d\d|WARNING: All log messages before absl::InitializeLog)")


# What TF's collective executor prints when a peer goes away, and the lines that continue it: at the end of a run
# that succeeded, only the shutdown order (the first worker to exit closes its channels while another finishes).
_ABORT = re.compile(r"^[EW]\d{4} .*(StartAbort|Aborting RingReduce|rendezvous is aborting|tasks have crashed)")
_TF_LOG = re.compile(r"^([IWEF]\d{4} |Additional GRPC error|:UNKNOWN:|The error could be from|\s|$)")


class AbortNoise:
    """Holds streamed lines back from TF's first abort message on, while only TF's log lines follow it: released
    when the script prints anything else (it trains on) or fails, dropped when it exits 0 (they stay in the
    task's log). Pure."""

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
        """The script exited: what is still held, unless it succeeded."""
        out = self._release([])
        return [] if ok else out


def display(raw: bytes) -> str:
    """A line as a terminal would show it: carriage-return updates (progress bars) keep their last state."""
    text = raw.decode(errors="replace").rstrip("\r\n")
    return text.rsplit("\r", 1)[-1]
