"""Every relative link of the documentation (README.md and docs/**/*.md) points at a file that exists and, with an
`#anchor`, at a heading of it; the README's links also work on the site, where it is the home page
(tools/mkdocs_hooks.py); the pages and messages of raytf that cite a documentation page cite one that exists.
(`mkdocs build --strict` checks the site's links too, with the docs extra installed: docs/testing.md.) Pure."""

from __future__ import annotations

import posixpath
import re
import unicodedata
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tools import mkdocs_hooks as site

_FENCE = re.compile(r"^\s*(`{3,}|~{3,})")
_LINK = re.compile(r"!?\[(?:[^\]\[]|\[[^\]]*\])*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
_HEADING = re.compile(r"^(#{1,6})\s+(.+?)\s*#*\s*$")
_API_ENTRY = re.compile(r"^:::\s+(\S+)")


def pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def _prose(text: str, spans: bool = False) -> list[tuple[int, str]]:
    """(line number, line) of the lines outside fenced code blocks; inline code spans blanked out unless `spans`."""
    out, fence = [], None
    for n, line in enumerate(text.splitlines(), 1):
        m = _FENCE.match(line)
        if fence is None and m:
            fence = m.group(1)[0]
        elif fence is not None and m and m.group(1)[0] == fence:
            fence = None
        elif fence is None:
            out.append((n, line if spans else re.sub(r"`[^`]*`", lambda c: " " * len(c.group()), line)))
    return out


def _heading_text(raw: str) -> str:
    """A heading as it reads: code spans' text kept, links' text kept, emphasis marks dropped."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", raw)
    return re.sub(r"[`*]", "", text).strip()


def mkdocs_slug(text: str) -> str:
    """Python-Markdown's toc slug (MkDocs' default), as the site's anchors are made."""
    text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")
    text = re.sub(r"[^\w\s-]", "", text).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


def github_slug(text: str) -> str:
    """GitHub's anchor for a heading, as README.md and the pages are read on GitHub."""
    return re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")


def headings(path: Path) -> list[str]:
    return [_heading_text(m.group(2)) for _, line in _prose(path.read_text(), spans=True)
            if (m := _HEADING.match(line))]


def anchors(path: Path) -> set[str]:
    """The anchors a page offers: its headings', and on the API page each mkdocstrings entry's (its identifier)."""
    text = path.read_text()
    found = {mkdocs_slug(h) for h in headings(path)}
    found |= {m.group(1) for line in text.splitlines() if (m := _API_ENTRY.match(line))}
    return found


def links(path: Path) -> list[tuple[int, str]]:
    """(line, target) of every inline link and image outside code."""
    return [(n, m.group(1)) for n, line in _prose(path.read_text()) for m in _LINK.finditer(line)]


def _external(target: str) -> bool:
    return bool(re.match(r"^[a-z][a-z0-9+.-]*:", target))


def _resolve(page: Path, target: str) -> Path | None:
    """The file a relative link of `page` points at: a file of the repository beside the page, or (from a docs page)
    one the site serves from elsewhere in the repository (tools/mkdocs_hooks.py's FROM_REPO)."""
    path = (page.parent / target).resolve()
    if path.is_file():
        return path
    docs = ROOT / "docs"
    if page.is_relative_to(docs):
        site_path = posixpath.normpath(posixpath.join(str(page.parent.relative_to(docs)), target))
        if site_path in site.FROM_REPO:
            return ROOT / site.FROM_REPO[site_path]
    return None


@pytest.mark.parametrize("page", pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_points_at_a_file_and_a_heading(page):
    broken = []
    for line, target in links(page):
        if _external(target):
            continue
        path_part, _, anchor = target.partition("#")
        where = f"{page.relative_to(ROOT)}:{line}: {target}"
        dest = _resolve(page, path_part) if path_part else page
        if dest is None:
            broken.append(f"{where}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{where}: no heading with that anchor in {dest.relative_to(ROOT)}")
    assert not broken, "\n".join(broken)


def test_the_readmes_links_work_on_the_site_too():
    """On the site the README is the home page, its links into docs/ made relative to the site's root: every
    relative link it has must be into docs/, one of the files the site serves from elsewhere, or an anchor."""
    elsewhere = [f"README.md:{n}: {t}" for n, t in links(ROOT / "README.md") if not _external(t)
                 and not t.startswith(("#", site.DOCS)) and t.partition("#")[0] not in site.FROM_REPO]
    assert not elsewhere, f"the site would not have these: {elsewhere}"
    home = site.index_markdown((ROOT / "README.md").read_text())
    assert "](docs/" not in home and "](scripts.md)" in home and "](img/learning_curves.png)" in home


@pytest.mark.parametrize("page", pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_each_heading_has_one_anchor_on_github_and_on_the_site(page):
    """A heading's anchor is the same on GitHub and on the site (a link then works in both), and no two headings of
    a page share one (each tool would number the second its own way)."""
    names = headings(page)
    differ = [(h, github_slug(h), mkdocs_slug(h)) for h in names if github_slug(h) != mkdocs_slug(h)]
    assert not differ, f"reword these headings (GitHub's anchor, the site's): {differ}"
    slugs = [mkdocs_slug(h) for h in names]
    assert len(slugs) == len(set(slugs)), sorted({s for s in slugs if slugs.count(s) > 1})


def test_the_checks_find_a_broken_link_and_a_broken_anchor(tmp_path):
    """The link check itself: a missing file and a missing heading are both found."""
    page = ROOT / "docs" / "x-check.md"  # (a page's place decides what its links resolve against; never written)
    assert _resolve(page, "no-such-page.md") is None
    assert _resolve(page, "benchmarks/RESULTS.md") == ROOT / "benchmarks" / "RESULTS.md"
    assert "keras-3" in anchors(ROOT / "docs" / "training-function.md")
    assert "no-such-heading" not in anchors(ROOT / "docs" / "training-function.md")
    assert "raytf.TrainContext" in anchors(ROOT / "docs" / "reference" / "api.md")
    text = "see [a](a.md#b), `[not](code.md)`\n```\n[in](fence.md)\n```\n![img](img/x.png)\n"
    sample = tmp_path / "sample.md"
    sample.write_text(text)
    assert links(sample) == [(1, "a.md#b"), (5, "img/x.png")]


def test_raytf_cites_documentation_pages_that_exist():
    """Messages and comments of the package name the page that holds a section (`docs/security.md`), not a README
    section that moved: every `docs/....md` they cite exists, and none cites the README's sections."""
    cited, readme = set(), []
    for path in sorted((ROOT / "raytf").rglob("*.py")) + sorted((ROOT / "conf").glob("*.yaml")):
        text = path.read_text()
        cited |= {(m.group(0), path.relative_to(ROOT)) for m in re.finditer(r"docs/[\w/.-]+\.md", text)}
        readme += [f"{path.relative_to(ROOT)}: {m.group(0)}" for m in re.finditer(r"README[:,]\s*[\"A-Z][\w ]*", text)]
    missing = [f"{where}: {doc}" for doc, where in cited if not (ROOT / doc).is_file()]
    assert not missing, missing
    assert not readme, f"cite the docs page that holds the section now: {readme}"
    assert ("docs/security.md", Path("raytf/_core/tf_ports.py")) in cited
