"""Where CI's time goes, from a `.ci/run` log: `python -m tools.ci_times LOG [--write docs/testing.md]`.

Reads the log's own marks (`=== .ci/run: <step> at HH:MM:SS, Ns in`), each pytest's closing line (`N passed ...
in S s`) and, when pytest ran with `--durations=0` (`PYTEST_ADDOPTS=--durations=0 bash .ci/run`), its durations:
the steps, the tiers, the slowest tests. Prints the tables as Markdown; `--write` puts them in a file between its
`<!-- ci-times -->` markers (docs/testing.md), so the page is regenerated, never edited by hand.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from tools import markers

BEGIN, END = "<!-- ci-times: begin (python -m tools.ci_times LOG --write docs/testing.md) -->", "<!-- ci-times: end -->"
_MARK = re.compile(r"^=== \.ci/run: (?P<what>.+?) at (?P<clock>\d\d:\d\d:\d\d), (?P<s>\d+)s in$")
_CLOSING = re.compile(r"^=+ (?P<counts>.*?) in (?P<s>[\d.]+)s(?: \([\d:]+\))? =+$")
_DURATION = re.compile(r"^(?P<s>[\d.]+)s (?P<phase>call|setup|teardown)\s+(?P<test>\S+)")
TIERS = ("core", "task", "ray", "cluster")


@dataclass
class Pytest:
    """One pytest run of the log: its closing line and its durations (test id -> seconds, phases summed)."""

    counts: str = ""
    seconds: float | None = None
    durations: dict[str, float] = field(default_factory=lambda: defaultdict(float))

    def tiers(self) -> dict[str, float]:
        out: dict[str, float] = defaultdict(float)
        for test, s in self.durations.items():
            parts = test.split("/")
            out[parts[1] if len(parts) > 2 and parts[1] in TIERS else "other"] += s
        return dict(out)


@dataclass
class Log:
    marks: list[tuple[str, int]] = field(default_factory=list)  # (what, seconds since the run's start)
    runs: list[Pytest] = field(default_factory=list)


def parse(text: str) -> Log:
    """The marks and the pytest runs of a `.ci/run` log, in the order they were printed (the second step's other
    side is printed after its own)."""
    log, current, in_durations = Log(), Pytest(), False
    for line in text.splitlines():
        if m := _MARK.match(line):
            log.marks.append((m["what"], int(m["s"])))
        elif "slowest" in line and "durations" in line and line.startswith("="):
            in_durations = True
        elif in_durations and (m := _DURATION.match(line)):
            current.durations[m["test"]] += float(m["s"])
        elif m := _CLOSING.match(line):
            if "passed" in m["counts"] or "failed" in m["counts"] or "error" in m["counts"]:
                current.counts, current.seconds = m["counts"], float(m["s"])
                log.runs.append(current)
                current, in_durations = Pytest(), False
        elif in_durations and line.startswith("="):
            in_durations = False
    return log


def _clock(s: float) -> str:
    return f"{int(s) // 60}:{int(s) % 60:02d}"


def tables(log: Log, slowest: int = 15) -> str:
    """The steps, the tiers per pytest run, and the `slowest` tests, as Markdown."""
    out = []
    marks = dict(log.marks)
    step1 = [s for w, s in log.marks if w.startswith("step 1")]
    step2 = [s for w, s in log.marks if w.startswith("step 2")]
    end = [s for w, s in log.marks if w.startswith("the end")]
    docs = [s for w, s in log.marks if w.startswith("the documentation site")]  # (between the steps, if any)
    wheel = [s for w, s in log.marks if w.startswith("the wheel")]  # (after the docs site, if any)
    out.append("| step | wall |\n|---|---|")
    if step1 and step2:
        first = log.runs[0] if log.runs else None
        step1_end = docs[0] if docs else step2[0]
        out.append(f"| 1: the README's test command | {_clock(step1_end - step1[0])} |")
        if first is not None and first.seconds is not None:
            out.append(f"| 1, its pytest ({first.counts}) | {_clock(first.seconds)} |")
            out.append(f"| 1, its install and lint (the rest) | {_clock(step1_end - step1[0] - first.seconds)} |")
        if docs:
            out.append(f"| the documentation site (`mkdocs build --strict`, its own environment) | "
                       f"{_clock((wheel[0] if wheel else step2[0]) - docs[0])} |")
        if wheel:
            out.append(f"| the wheel: built, installed fresh, `raytf init` and a first run outside the clone | "
                       f"{_clock(step2[0] - wheel[0])} |")
    if step2 and end:
        out.append(f"| 2: the slow tier, two pytest processes side by side | {_clock(end[0] - step2[0])} |")
        for i, run in enumerate(log.runs[1:], 1):
            if run.seconds is not None:
                out.append(f"| 2, side {i} ({run.counts}) | {_clock(run.seconds)} |")
    if end:
        out.append(f"| the whole `.ci/run` | {_clock(end[0])} |")
    del marks
    out.append("")
    out.append("| pytest run | " + " | ".join(TIERS) + " | other |\n|---|" + "---|" * (len(TIERS) + 1))
    for i, run in enumerate(log.runs):
        tiers = run.tiers()
        name = "step 1" if i == 0 else f"step 2, side {i}"
        out.append(f"| {name} | " + " | ".join(f"{tiers.get(t, 0):.0f} s" for t in (*TIERS, "other")) + " |")
    out.append("")
    everything = [(s, t) for run in log.runs for t, s in run.durations.items()]
    out.append(f"The {slowest} slowest tests (setup, call and teardown together):\n")
    out.append("| s | test |\n|---|---|")
    for s, t in sorted(everything, reverse=True)[:slowest]:
        out.append(f"| {s:.1f} | `{t}` |")
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tools.ci_times", description=__doc__.splitlines()[0])
    p.add_argument("log", type=Path, help="a `.ci/run` log (PYTEST_ADDOPTS=--durations=0 for the tests' times)")
    p.add_argument("--write", type=Path, metavar="PAGE", help="put the tables between PAGE's markers")
    p.add_argument("--slowest", type=int, default=15, help="how many of the slowest tests to list (15)")
    args = p.parse_args(argv)
    log = parse(args.log.read_text(errors="replace"))
    if not log.runs:
        print(f"{args.log}: no pytest run in it", file=sys.stderr)
        return 2
    text = tables(log, args.slowest)
    if args.write:
        markers.write(args.write, BEGIN, END, text)
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
