"""A failure told in a few lines (raytf issue 54): the exception's type and the first lines of its message, bounded in
characters, with the data an exception dumps left out (a tensor's or an array's values: TF's "Attempt to convert a
value (PerReplica:{...})" carries the whole input batch), and the frames of the user's own code. Everything stays in
the task's log. Pure."""

from __future__ import annotations

import os
import re
import sysconfig
import traceback
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

MAX_LINES = 3  # of a message, data left out
MAX_LINE_CHARS = 1000  # (raytf's own one-line errors, the fix included, run to ~600)
MAX_CHARS = 1600  # of a whole summary
MAX_FRAMES = 3  # the user's own, innermost last

# A line of dumped values: numpy's and TF's reprs of an array ("[[0.1, 0.2, ...", "array([[...", "...,",
# "0.0668555 , 0.80646753]]], shape=(16, 28), dtype=float32)>"): it starts with a number, a bracket or an ellipsis.
_DATA = re.compile(r"^\s*(?:array\(|numpy=|[\[\]]|\.\.\.|…|[-+]?(?:\d|\.\d))")
# A tensor's header in a dump ("0: <tf.Tensor: shape=(16, 28, 28), dtype=float32, numpy="): kept, its values not.
_TENSOR_HEAD = re.compile(r"<tf\.Tensor: shape=\(([^)]*)\), dtype=(\w+), numpy=\s*$")


def _tensor_head(line: str) -> str:
    return _TENSOR_HEAD.sub(lambda m: f"<tf.Tensor: shape=({m.group(1)}), dtype={m.group(2)}, values left out>", line)


@dataclass(frozen=True)
class Frame:
    """One frame of a traceback: where (file, line, function) and its source line."""

    file: str
    line: int
    name: str
    text: str = ""


def is_data(line: str) -> bool:
    """Whether `line` is a dumped value (a tensor's, an array's), not words: a tensor's header is words."""
    return bool(line.strip()) and not _TENSOR_HEAD.search(line) and bool(_DATA.match(line))


def message_lines(message: str, max_lines: int = MAX_LINES, max_line_chars: int = MAX_LINE_CHARS) -> list[str]:
    """The first lines of an exception's message that are words, not dumped data, each cut to `max_line_chars`; the
    message's last line too when it is words and further down (TF says the error's point after the dump: "... with
    an unsupported type (<class 'PerReplica'>) to a Tensor."), and a note of what was left out."""
    raw = [line.rstrip() for line in message.strip().splitlines()]
    words = [i for i, line in enumerate(raw) if line.strip() and not is_data(line)]
    lines = [_tensor_head(line) for line in raw]
    keep = words[:max_lines]
    if words and words[-1] not in keep:
        keep = [*keep[: max_lines - 1], words[-1]] if len(keep) >= max_lines else [*keep, words[-1]]
    out = [_cut(lines[i], max_line_chars) for i in keep]
    left = len([line for line in lines if line.strip()]) - len(keep)
    if left:
        out.append(f"... ({left} more line(s) of the message in the task's log)")
    return out or [""]


def summary(type_name: str, message: str, frames: Sequence[Frame] = (), max_chars: int = MAX_CHARS) -> str:
    """`Type: the message's first lines` then the user's own frames (`File "train.py", line 18, in <module>` and
    its source line), at most `max_chars` in all."""
    head = message_lines(message)
    lines = [f"{type_name}: {head[0]}" if head[0] else type_name, *head[1:]]
    for f in frames[-MAX_FRAMES:]:
        lines.append(f'File "{f.file}", line {f.line}, in {f.name}' + (f": {f.text.strip()}" if f.text else ""))
    text = "\n".join(lines)
    return text if len(text) <= max_chars else _cut(text, max_chars)


def own_frames(frames: Iterable[Frame], library_dirs: Iterable[str]) -> list[Frame]:
    """The frames of the user's code: not of the interpreter's library, an installed package or raytf (files under
    `library_dirs`), nor frozen or generated code (`<frozen runpy>`, `<string>`)."""
    roots = tuple(os.path.join(os.path.abspath(d), "") for d in library_dirs if d)
    return [f for f in frames if not f.file.startswith("<") and not os.path.abspath(f.file).startswith(roots)]


def library_dirs() -> list[str]:
    """Where this interpreter's library, its installed packages and raytf live: not the user's code."""
    paths = sysconfig.get_paths()
    raytf_dir = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    return sorted({paths[k] for k in ("stdlib", "platstdlib", "purelib", "platlib") if paths.get(k)} | {raytf_dir})


def own_frames_of(e: BaseException) -> list[Frame]:
    """The frames of the user's own code in `e`'s traceback (own_frames)."""
    frames = [Frame(f.filename, f.lineno or 0, f.name, f.line or "") for f in traceback.extract_tb(e.__traceback__)]
    return own_frames(frames, library_dirs())


def bounded_traceback(text: str, max_tail_lines: int = MAX_LINES) -> str:
    """A formatted traceback for the terminal: its frames as they are, the exception's message after them as
    `message_lines` gives it (a dumped tensor left out); the whole stays in the task's log."""
    lines = text.rstrip().splitlines()
    frame = max((i for i, line in enumerate(lines) if line.startswith('  File "')), default=-1)
    if frame < 0:
        return "\n".join(message_lines(text, max_tail_lines))
    end = frame + 1
    while end < len(lines) and lines[end].startswith("    "):  # its source line, the carets under it
        end += 1
    if end >= len(lines):
        return text.rstrip()
    return "\n".join([*lines[:end], *message_lines("\n".join(lines[end:]), max_tail_lines)])


def tail_lines(tail: Sequence[str]) -> list[str]:
    """A dead script's last stderr lines without the dumped data among them (each run of it, blank lines within
    included, one note)."""
    out: list[str] = []
    dropped = 0
    for line in tail:
        if is_data(line) or (dropped and not line.strip()):
            dropped += 1
            continue
        if dropped:
            out.append(f"... ({dropped} line(s) of values left out: the task's log has them)")
            dropped = 0
        out.append(_cut(_tensor_head(line), MAX_LINE_CHARS))
    if dropped:
        out.append(f"... ({dropped} line(s) of values left out: the task's log has them)")
    return out


def _cut(text: str, n: int) -> str:
    return text if len(text) <= n else text[: n - 1].rstrip() + "…"
