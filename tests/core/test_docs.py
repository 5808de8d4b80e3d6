"""The generated parts of the documentation are their sources': the settings table (docs/reference/configuration.md)
is the schema's (tools/config_reference.py), the command-line page's help the CLIs' own (tools/cli_reference.py),
the API page names all of `raytf.__all__`; and the README's test command is CI's. Pure."""

import dataclasses
import subprocess
import sys

from omegaconf import DictConfig, OmegaConf

from raytf.config import Config
from tests.conftest import ROOT
from tools import cli_reference
from tools import config_reference as docs

REGENERATE = "python -m tools.config_reference --write"
SETTINGS_PAGE = ROOT / "docs" / "reference" / "configuration.md"


def _schema_keys(node=None, prefix=""):
    """Every leaf key of the schema, found through OmegaConf (not through the generator)."""
    node = OmegaConf.structured(Config) if node is None else node
    keys = []
    for name in node:
        child = node[name]
        if isinstance(child, DictConfig) and dataclasses.is_dataclass(OmegaConf.get_type(child)):
            keys += _schema_keys(child, f"{prefix}{name}.")
        else:
            keys.append(f"{prefix}{name}")
    return keys


def test_the_settings_pages_table_is_the_generators_output():
    assert docs.PAGE == SETTINGS_PAGE
    block = docs.page_block(SETTINGS_PAGE.read_text())
    assert block is not None, f"{SETTINGS_PAGE.name} lost its {docs.BEGIN!r} ... {docs.END!r} markers"
    assert block == docs.block(), f"docs/reference/configuration.md's table differs from the schema: run `{REGENERATE}`"


def _missing_keys(page_text: str) -> list[str]:
    block = docs.page_block(page_text) or ""
    return [k for k in _schema_keys() if f"| `{k}` |" not in block]


def test_every_schema_key_is_in_the_settings_page_with_a_meaning():
    keys = _schema_keys()
    assert {"train.python_path", "train.seed", "checkpoint.export_model", "cluster.ps.max_shards"} <= set(keys)
    missing = _missing_keys(SETTINGS_PAGE.read_text())
    assert not missing, f"not in docs/reference/configuration.md's table: {missing}; run `{REGENERATE}`"
    rows = {s.key: s for s in docs.settings()}
    assert set(keys) <= set(rows)
    unexplained = [s.key for s in docs.settings() if not s.meaning]  # leaf keys and nested sections alike
    assert not unexplained, f"no comment above these fields in raytf/config/schema.py: {unexplained}"


def test_a_key_left_out_of_the_settings_page_is_found_missing():
    """The check above fails for a page that lost a row (the generator's own output cannot show it)."""
    text = SETTINGS_PAGE.read_text()
    row = next(line for line in text.splitlines() if line.startswith("| `train.seed` |"))
    assert _missing_keys(text.replace(row + "\n", "")) == ["train.seed"]


def test_the_settings_table_renders_as_written():
    """Outside code spans, a meaning holds nothing Markdown would take for markup: `<run>` is an HTML tag to MkDocs
    and GitHub (shown as nothing), `__main__` bold. Such text goes in backticks in schema.py's comment."""
    import re

    markup = {s.key: hit for s in docs.settings()
              if (hit := re.findall(r"<\w|__\w|\*\w", re.sub(r"`[^`]*`", "", s.meaning)))}
    assert markup == {}, f"put these in backticks in raytf/config/schema.py's comments: {markup}"


def test_defaults_as_yaml_spells_them():
    rows = {s.key: s.default for s in docs.settings()}
    assert rows["ray.address"] == "null" and rows["checkpoint.export_model"] == "true"
    assert rows["cluster.strategy"] == "multi_worker_mirrored" and rows["train.args"] == "[]"
    assert rows["train.entrypoint"] == '""' and rows["storage.path"] == "./runs"
    assert rows["cluster.worker"] == ""  # a section row
    assert "`parameter_server`" in {s.key: s.meaning for s in docs.settings()}["cluster.strategy"]


def test_the_generator_prints_the_table_without_ray_or_tensorflow():
    check = ("import sys; import tools.config_reference as d; "
             "print(sorted(m for m in ('ray', 'tensorflow', 'tf_keras') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-m", "tools.config_reference"], capture_output=True, text=True, cwd=ROOT,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout == docs.table()
    light = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert light.stdout.strip() == "[]", light.stderr


def test_the_cli_pages_help_is_the_clis_own():
    page = ROOT / "docs" / "reference" / "cli.md"
    assert page == cli_reference.PAGE
    block = cli_reference.page_block(page.read_text())
    assert block is not None, f"docs/reference/cli.md lost its {cli_reference.BEGIN!r} ... markers"
    if block != cli_reference.block() and sys.version_info[:2] != (3, 11):
        import pytest

        pytest.skip("argparse formats help differently from one Python to another: the page is CI's Python 3.11's")
    assert block == cli_reference.block(), "docs/reference/cli.md differs from the CLIs: run " \
                                           "`python -m tools.cli_reference --write`"
    commands = [c for c, _ in cli_reference.parsers()]
    assert commands == ["raytf", "raytf init", "python -m raytf.launch", "python -m raytf.runs",
                        "python -m raytf.runs ls", "python -m raytf.runs show", "python -m raytf.runs plot"]


def test_the_clis_print_the_pages_help_without_ray_or_tensorflow():
    """What `--help` prints in a terminal as wide as the page is the page's text, and asking for it imports neither
    Ray nor TensorFlow (each CLI parses its arguments before it loads either)."""
    import os

    code = ("import runpy, sys\n"
            "sys.argv = [sys.argv[1], '--help']\n"
            "try:\n    runpy.run_module(sys.argv[0], run_name='__main__')\n"
            "except SystemExit as e:\n    assert e.code == 0, e.code\n"
            "print('LOADED', sorted(m for m in ('ray', 'tensorflow', 'tf_keras', 'keras') if m in sys.modules))")
    env = {**os.environ, "COLUMNS": str(cli_reference.WIDTH + 2)}  # argparse's width: the terminal's less 2
    helps = dict(cli_reference.parsers())
    for module, command in [("raytf.cli", "raytf"), ("raytf.launch", "python -m raytf.launch"),
                            ("raytf.runs", "python -m raytf.runs")]:
        out = subprocess.run([sys.executable, "-c", code, module], capture_output=True, text=True, cwd=ROOT,
                             env=env, timeout=60)
        assert out.returncode == 0, out.stderr
        text, _, loaded = out.stdout.rpartition("LOADED ")
        assert loaded.strip() == "[]", f"{module} --help imported {loaded}"
        assert text == cli_reference._help(helps[command])


def test_the_api_page_documents_every_public_name():
    """docs/reference/api.md has a `::: raytf.NAME` entry (mkdocstrings renders its docstring) for each name of
    raytf.__all__, and one for raytf.compat."""
    import ast

    tree = ast.parse((ROOT / "raytf" / "__init__.py").read_text())
    public = next(ast.literal_eval(node.value) for node in tree.body if isinstance(node, ast.Assign)
                  and any(getattr(t, "id", None) == "__all__" for t in node.targets))
    entries = {line.split(":::", 1)[1].strip() for line in (ROOT / "docs" / "reference" / "api.md").read_text()
               .splitlines() if line.startswith(":::")}
    assert {f"raytf.{name}" for name in public} | {"raytf.compat"} == entries


def test_the_docs_lock_pins_the_docs_extra_with_hashes():
    """requirements/docs.txt (CI's documentation build installs it) pins every package of pyproject.toml's `docs`
    extra at a version its range admits, each with hashes, and says the command that refreshes it."""
    import re

    import tomllib
    from packaging.requirements import Requirement

    from tests.core.test_layout import _pinned

    lock = (ROOT / "requirements" / "docs.txt").read_text()
    pins = _pinned(lock)
    wanted = [Requirement(r) for r in tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
              ["optional-dependencies"]["docs"]]
    assert {re.sub(r"[-_.]+", "-", r.name).lower() for r in wanted} == {"mkdocs", "mkdocs-material", "mkdocstrings"}
    for req in wanted:
        version = pins.get(re.sub(r"[-_.]+", "-", req.name).lower())
        assert version is not None and req.specifier.contains(version), (req, version)
    assert "mkdocstrings-python" in pins  # the [python] extra's handler
    entries = re.split(r"\n(?=[A-Za-z0-9])", lock[lock.index("\n", lock.index("uv pip compile")) + 1:])
    assert [e.split()[0] for e in entries if "==" in e.split("\n")[0] and "--hash=sha256:" not in e] == []
    assert "uv pip compile pyproject.toml --extra docs --generate-hashes" in lock.split("\n", 3)[1]


def test_the_readme_test_command_is_what_ci_runs_first():
    """The README's **Test** command is `.ci/run`'s step 1, character for character (a newcomer pastes one, CI
    runs the other), and calls Python by `python -m` only: an interpreter called by its path, its environment not
    activated, has none of its scripts on PATH (issue 50)."""
    import re

    readme = (ROOT / "README.md").read_text()
    # (A snippet marker may stand between the heading and the block: tests/core/test_docs_snippets.py.)
    block = re.search(r"\*\*Test\*\*[^\n]*\n\n(?:<!--[^\n]*-->\n\n)?```bash\n(.+?)\n```", readme, re.S)
    assert block is not None, "README.md lost its **Test** command block"
    command = block.group(1).strip()
    assert "\n" not in command
    ci = [line.strip() for line in (ROOT / ".ci/run").read_text().splitlines()]
    assert command in ci, f"README's test command is not a line of .ci/run: {command}"
    steps = [part.strip() for part in command.split("&&")]
    assert all(step.startswith("python -m ") for step in steps), steps
    assert "requirements/test.txt" in command
    # uv compiles no bytecode by default: where PYTHONDONTWRITEBYTECODE is set (as on this project's machines), every
    # process then compiled TensorFlow from source, and the README's tests took twice as long (24:44 against 12:51).
    assert "--compile-bytecode" in command


def test_the_pictures_tool_draws_both_figures_from_a_run(tmp_path):
    """`python -m tools.docs_pictures RUN_DIR` draws docs/img's two figures with raytf's own plotting, here from a
    fake run (into a directory of the test's: the pages' own pictures come from a real run)."""
    from tests.core.test_runs_cli import _fake_run, _step_rows
    from tools import docs_pictures

    epochs = [{"run": "exp1", "attempt": 0, "rank": rank, "role": "worker", "kind": "epoch", "epoch": epoch,
               "step": 10 * epoch, "time": 100.0 + epoch, "fit": 1, "num_workers": 2, "loss": 1.0 / epoch,
               "val_loss": 1.2 / epoch} for rank in (0, 1) for epoch in (1, 2)]
    run = _fake_run(tmp_path / "runs", metrics=_step_rows(0) + epochs)
    assert docs_pictures.main([str(run), "--out", str(tmp_path / "img")]) == 0
    for name in docs_pictures.PICTURES:
        assert (tmp_path / "img" / name).read_bytes().startswith(b"\x89PNG\r\n\x1a\n"), name
    assert docs_pictures.main([str(tmp_path / "no-such-run"), "--out", str(tmp_path / "img")]) == 1
    assert {p.name for p in (ROOT / "docs" / "img").iterdir()} >= set(docs_pictures.PICTURES)
