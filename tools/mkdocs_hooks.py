"""MkDocs hooks (mkdocs.yml's `hooks:`): the site's pages that are not under docs/. The home page is README.md, its
links into docs/ made relative to the site's root, so the README is written once and reads right on GitHub and on
the site; the benchmark results (benchmarks/RESULTS.md and the figure it shows) are served as they are in the
repository, at the same paths.

The mapping is data the link check reads too (tests/core/test_docs_links.py): this module imports MkDocs only
inside the hook, so the pure tests can import it without the docs extra installed.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = "README.md"
INDEX = "index.md"  # the README's place on the site
# Site path -> the repository file served there, for the files outside docs/ that pages link to.
FROM_REPO = {"benchmarks/RESULTS.md": "benchmarks/RESULTS.md", "benchmarks/scale.png": "benchmarks/scale.png",
             "CHANGELOG.md": "CHANGELOG.md"}
DOCS = "docs/"

_LINK = re.compile(r"(\]\()([^)\s]+)(\))")


def site_target(target: str) -> str:
    """A README link's target as the home page must say it: into docs/ relative to the site's root; anchors,
    absolute URLs and the files of FROM_REPO as they are."""
    return target[len(DOCS):] if target.startswith(DOCS) else target


def index_markdown(readme: str) -> str:
    """The home page's Markdown: README.md's, each link (and image) into docs/ relative to the site's root."""
    return _LINK.sub(lambda m: m.group(1) + site_target(m.group(2)) + m.group(3), readme)


def on_files(files, config):
    from mkdocs.structure.files import File

    files.append(File.generated(config, INDEX, content=index_markdown((ROOT / README).read_text())))
    for site_path, repo_path in FROM_REPO.items():
        files.append(File.generated(config, site_path, abs_src_path=str(ROOT / repo_path)))
    return files
