"""A generated block in a document, between its two marker lines: found, and replaced in place (the docs' generated
tables: the configuration reference, the private-API table, CI's times). Pure."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path


def block(text: str, begin: str, end: str) -> str | None:
    """The marked block in `text` (markers included), or None without both markers in order."""
    start, stop = text.find(begin), text.find(end)
    if start < 0 or stop < start:
        return None
    return text[start:stop + len(end)]


def write(path: Path, begin: str, end: str, body: str) -> bool:
    """`body` between `path`'s markers (a newline after `begin`; `body` ends with one); whether the file changed.
    Raises SystemExit naming the file when it lacks them."""
    text = path.read_text()
    old = block(text, begin, end)
    if old is None:
        raise SystemExit(f"{path}: no {begin!r} ... {end!r} markers: add the two lines where the block goes")
    new = f"{begin}\n{body}{end}"
    if new == old:
        return False
    path.write_text(text.replace(old, new))
    return True


def main(argv: list[str] | None, *, prog: str, description: str, page: Path, begin: str, end: str,
         table: Callable[[], str], what: str) -> int:
    """A generator's command line: print the table, or (`--write`) put it between `page`'s markers."""
    ap = argparse.ArgumentParser(prog=prog, description=description)
    ap.add_argument("--write", action="store_true", help=f"replace the marked {what} in {page.name}")
    args = ap.parse_args(argv)
    if not args.write:
        sys.stdout.write(table())
        return 0
    changed = write(page, begin, end, table())
    print(f"{page}: {what} {'rewritten' if changed else 'unchanged'}")
    return 0
