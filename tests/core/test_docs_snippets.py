"""Every code block of the documentation (README.md and docs/**/*.md) works, as far as a pure test can tell: each
`yaml` block parses, and one shaped like a raytf configuration loads (`raytf.load_config`: its keys, values and
rules); each `python` block compiles; each `python -m raytf.launch` or `python -m raytf.runs` command of a `bash`
block parses with the CLI's own parser, and each `raytf.launch` command passes `--dry-run`, which plans the run
and starts nothing (the cluster it plans against is described, not asked: see `_described`). `text` blocks (a
program's output, a file's text) are not code.

A block this test cannot run whole carries a marker, an HTML comment as the nearest line above its fence:

- `<!-- snippet: slow -->`: it trains, on one machine. Its launch commands are dry-run here; a slow-tier test runs
  the blocks `slow_snippets()` lists.
- `<!-- snippet: cluster -->`: it needs a Ray cluster. Its launch commands are dry-run here, against a simulated
  cluster with a node for every task; nothing runs it.
- `<!-- snippet: skip (why) -->`: it needs what no test has (credentials, a server, the reader's own code); the
  reason is required. Its static checks (parsing, compiling, the CLIs' arguments) still apply.

An unmarked `bash` block may hold `--dry-run` launches only, and an unmarked `python` block may not train
(`raytf.fit`, `raytf.sweep`, `raytf.scaling`): either fails here until it is marked. Pure and fast: no Ray, no
TensorFlow (the dry runs are in this process)."""

from __future__ import annotations

import ast
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from tests.conftest import ROOT

LANGUAGES = ("python", "yaml", "bash", "text")
KINDS = ("slow", "cluster", "skip")
_MARKER = re.compile(r"^<!--\s*snippet:\s*(?P<kind>\w+)\s*(?:\((?P<reason>[^)]*)\))?\s*-->$")
_FENCE = re.compile(r"^(?P<indent> *)(?P<fence>`{3,}|~{3,})(?P<info>.*)$")
_TRAINS = re.compile(r"\braytf\.(fit|sweep|scaling)\(")
_LAUNCH = ("python", "-m", "raytf.launch")
_RUNS = ("python", "-m", "raytf.runs")


@dataclass(frozen=True)
class Snippet:
    """One fenced block: where it starts (its opening fence's line, 1-based), its language, its code (the fence's
    indentation removed) and its marker, if any."""

    file: str  # relative to the repository's root
    line: int
    language: str
    code: str
    marker: str | None = None  # "slow", "cluster", "skip"
    reason: str = ""

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}"


def pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def _marker(lines: list[str], fence_index: int) -> tuple[str | None, str]:
    """The marker on the nearest non-blank line above the fence, or (None, "")."""
    for line in reversed(lines[:fence_index]):
        if line.strip():
            m = _MARKER.match(line.strip())
            return (m["kind"], (m["reason"] or "").strip()) if m else (None, "")
    return None, ""


def parse(path: Path) -> list[Snippet]:
    """The fenced blocks of one Markdown file, in order (nested in list items too)."""
    lines = path.read_text().splitlines()
    out, i = [], 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, fence, start = len(m["indent"]), m["fence"], i
        body = []
        i += 1
        while i < len(lines) and not (lines[i].strip().startswith(fence) and set(lines[i].strip()) == {fence[0]}):
            line = lines[i]
            body.append(line[indent:] if line[:indent].strip() == "" else line.lstrip())
            i += 1
        kind, reason = _marker(lines, start)
        out.append(Snippet(str(path.relative_to(ROOT)), start + 1, m["info"].strip(), "\n".join(body) + "\n",
                           kind, reason))
        i += 1
    return out


def snippets() -> list[Snippet]:
    return [s for page in pages() for s in parse(page)]


def slow_snippets() -> list[tuple[str, int, str, str]]:
    """The blocks marked `<!-- snippet: slow -->` (they train on one machine), for a slow-tier test to run:
    (file relative to the repository's root, its opening fence's line, language, code). Run from the root."""
    return [(s.file, s.line, s.language, s.code) for s in snippets() if s.marker == "slow"]


def commands(code: str) -> list[list[str]]:
    """A bash block's commands as argv lists: lines joined at `\\`, comments dropped, split at `&&`, `||`, `;`
    and `|`."""
    out = []
    for line in code.replace("\\\n", " ").splitlines():
        lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
        lexer.whitespace_split, lexer.commenters = True, "#"
        argv: list[str] = []
        for word in lexer:
            if word in ("&&", "||", ";", "|"):
                out.append(argv)
                argv = []
            else:
                argv.append(word)
        out.append(argv)
    return [argv for argv in out if argv]


def _of(language: str, *kinds: str | None) -> list[Snippet]:
    return [s for s in snippets() if s.language == language and (not kinds or s.marker in kinds)]


def _ids(blocks: list[Snippet]) -> list[str]:
    return [s.where for s in blocks]


# The blocks are found once, at collection: every test below is about them.
BLOCKS = snippets()
BASH = [s for s in BLOCKS if s.language == "bash"]
DRY_RUN = [s for s in BASH if s.marker != "skip" and any(tuple(c[:3]) == _LAUNCH for c in commands(s.code))]


def test_the_docs_have_blocks_of_every_kind():
    languages = {s.language for s in BLOCKS}
    assert {"python", "yaml", "bash", "text"} <= languages
    assert {s.marker for s in BLOCKS} >= {None, "slow", "cluster", "skip"}
    assert any(file == "README.md" for file, _, _, _ in slow_snippets())


def test_every_block_names_a_language_this_test_knows():
    unknown = [f"{s.where}: {s.language or '(none)'}" for s in BLOCKS if s.language not in LANGUAGES]
    assert not unknown, f"name each block's language, one of {LANGUAGES} (`text` for output): {unknown}"


def test_every_marker_is_well_formed_and_stands_above_a_block():
    problems = []
    for page in pages():
        lines = page.read_text().splitlines()
        for n, line in enumerate(lines):
            if not re.match(r"^\s*<!--\s*snippet", line):
                continue
            where = f"{page.relative_to(ROOT)}:{n + 1}"
            m = _MARKER.match(line.strip())
            if m is None or m["kind"] not in KINDS:
                problems.append(f"{where}: not `<!-- snippet: slow|cluster|skip (why) -->`: {line.strip()}")
            elif m["kind"] == "skip" and not (m["reason"] or "").strip():
                problems.append(f"{where}: a skip says why: `<!-- snippet: skip (why) -->`")
            following = next((x for x in lines[n + 1:] if x.strip()), "")
            if not _FENCE.match(following):
                problems.append(f"{where}: no code block right after the marker")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("block", _of("yaml"), ids=_ids(_of("yaml")))
def test_yaml_blocks_parse_and_configurations_load(block):
    """A block whose top-level keys are all sections of raytf's schema is a configuration: it loads. One that names
    no training program (a fragment about the cluster, say) is loaded on top of conf/local.yaml, as it is used."""
    from raytf import load_config
    from raytf.config import Config

    data = yaml.safe_load(block.code)
    sections = {f for f in Config.__dataclass_fields__}
    if not (isinstance(data, dict) and data and set(data) <= sections):
        return  # YAML, but not a raytf configuration
    program = {"entrypoint", "script", "module"} & set(data.get("train") or {})
    if not program:
        data = _merged(yaml.safe_load((ROOT / "conf" / "local.yaml").read_text()), data)
    load_config(data)


def _merged(base: dict, top: dict) -> dict:
    out = dict(base)
    for key, value in top.items():
        out[key] = _merged(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


@pytest.mark.parametrize("block", _of("python"), ids=_ids(_of("python")))
def test_python_blocks_compile(block):
    compile(block.code, block.where, "exec")
    if block.marker is None:
        assert not _TRAINS.search(block.code), (
            f"{block.where} trains: mark it `<!-- snippet: slow -->` (one machine), `cluster` or `skip (why)`")


@pytest.mark.parametrize("block", BASH, ids=_ids(BASH))
def test_bash_blocks_cli_arguments_parse(block):
    """Every raytf command's arguments are the CLI's (its own parser, so a renamed flag fails here)."""
    from raytf import launch, runs

    for argv in commands(block.code):
        parser = launch._parser() if tuple(argv[:3]) == _LAUNCH else runs._parser() if tuple(argv[:3]) == _RUNS \
            else None
        if parser is None:
            continue
        try:
            parser.parse_intermixed_args(argv[3:]) if parser.prog.endswith("launch") else parser.parse_args(argv[3:])
        except SystemExit:
            pytest.fail(f"{block.where}: `{shlex.join(argv)}`: not arguments the CLI takes")


@pytest.mark.parametrize("block", [s for s in BASH if s.marker is None], ids=_ids([s for s in BASH
                                                                                  if s.marker is None]))
def test_unmarked_bash_blocks_hold_only_dry_runs(block):
    for argv in commands(block.code):
        assert tuple(argv[:3]) == _LAUNCH and "--dry-run" in argv, (
            f"{block.where}: `{shlex.join(argv)}` is not a --dry-run launch, which is all this test can run: mark "
            "the block `<!-- snippet: slow -->` (it trains on one machine), `cluster` (it needs a Ray cluster) or "
            "`skip (why)`")


def _described(cfg):
    """The cluster a dry run plans against, described instead of read, so that the check does not depend on this
    machine or reach a cluster: an embedded Ray on the 2-core machine the docs' examples are written for (its
    `ray.num_cpus` if set), or a cluster with a node for each of the run's tasks (the run's own bundle)."""
    from raytf._core.plan import make_plan
    from raytf._core.preview import Cluster
    from raytf._driver.preflight import resolve_address

    if resolve_address(cfg) is None:
        return Cluster("an embedded Ray on a 2-core machine (the docs')", ({"CPU": float(cfg.ray.num_cpus or 2)},),
                       embedded=True, unchecked=("memory",))
    return Cluster("a simulated cluster (a node per task)", tuple(dict(b) for b in make_plan(cfg).bundles),
                   embedded=False)


@pytest.mark.parametrize("block", DRY_RUN, ids=_ids(DRY_RUN))
def test_launch_commands_pass_a_dry_run(block, cli, monkeypatch):
    """`python -m raytf.launch ... --dry-run`, in this process: the configuration loads, the program is found, the
    plan fits what `_described` offers (a block marked slow must fit one machine: its commands are run there)."""
    import raytf.api.plan

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    planned = []

    def described(cfg):
        planned.append(_described(cfg))
        return planned[-1]

    monkeypatch.setattr(raytf.api.plan, "_cluster", described)
    for argv in commands(block.code):
        if tuple(argv[:3]) != _LAUNCH:
            continue
        args = [*argv[3:], *([] if "--dry-run" in argv else ["--dry-run"])]
        planned.clear()
        code, out, err = cli("raytf.launch", *args)
        assert code == 0, f"{block.where}: `{shlex.join(argv)}` --dry-run exited {code}:\n{out}\n{err}"
        assert planned, f"{block.where}: `{shlex.join(argv)}`: no plan was made"
        if block.marker == "slow":
            assert all(c.embedded for c in planned), (
                f"{block.where}: `{shlex.join(argv)}` needs a Ray cluster: mark the block `<!-- snippet: cluster -->`")


def _documented_calls(tree: ast.Module, name: str) -> set[str]:
    """The commands `documented.config(...)` or `documented.argv(...)` is given, as a literal, in the module function
    `name` or a module function it calls."""
    functions = {f.name: f for f in tree.body if isinstance(f, ast.FunctionDef)}
    body = [functions[name], *(functions[n.func.id] for n in ast.walk(functions[name])
                                if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in functions)]
    return {ast.literal_eval(c.args[0]) for f in body for c in ast.walk(f)
            if isinstance(c, ast.Call) and ast.unparse(c.func) in ("documented.config", "documented.argv") and c.args}


def test_a_launch_counted_as_trained_by_another_test_is_trained_there_as_written():
    """tests/documented.py's TRAINED_BY: each command is a slow block's launch (the docs test would otherwise train
    it), and the test named takes its config from that command (`documented.config`), so an edit of the page reaches
    the test that stands in for it."""
    from tests import documented

    launches = documented.launches()
    for command, test in documented.TRAINED_BY.items():
        assert command in launches, f"{command!r}: no slow block of the documentation launches it"
        path, name = test.split("::")
        tree = ast.parse((ROOT / path).read_text())
        assert name in {f.name for f in tree.body if isinstance(f, ast.FunctionDef)}, f"{test}: no such test"
        assert command in _documented_calls(tree, name), f"{test} does not train {command!r} (tests/documented.py)"
