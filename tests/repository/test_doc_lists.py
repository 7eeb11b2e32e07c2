"""The README's documentation list and the home page's name every guide of the site's nav
(issue 47: the README left out the Streaming, WebDataset, Hugging Face and TFDS guides, and
docs/index.md left out Images, S3, The build at scale, Metrics and Formats)."""

from __future__ import annotations

import pathlib
import re

import yaml

ROOT = pathlib.Path(__file__).resolve().parents[2]
LISTED = ("Guides", "Formats", "Coming from")  # the nav's sections of guides


def guide_pages() -> list[str]:
    """The pages of the nav's guide sections, as paths under docs/."""
    nav = yaml.load((ROOT / "mkdocs.yml").read_text(), Loader=yaml.BaseLoader)["nav"]
    pages = []
    for entry in nav:
        for section, items in entry.items():
            if section in LISTED:
                pages += [page for item in items for page in item.values()]
    return pages


def linked(path: pathlib.Path, prefix: str) -> set[str]:
    return {
        target.removeprefix(prefix)
        for target in re.findall(r"\]\(([^)#]+\.md)[^)]*\)", path.read_text())
    }


def test_the_nav_lists_guides():
    pages = guide_pages()
    assert "coming-from/tfds.md" in pages and "formats/mds.md" in pages and "images.md" in pages


def test_the_readme_links_every_guide():
    missing = sorted(set(guide_pages()) - linked(ROOT / "README.md", "docs/"))
    assert not missing, f"README.md's Documentation list leaves out {missing}"


def test_the_home_page_links_every_guide():
    missing = sorted(set(guide_pages()) - linked(ROOT / "docs" / "index.md", ""))
    assert not missing, f"docs/index.md leaves out {missing}"


def test_the_home_page_says_that_a_guides_blocks_run_in_order():
    """Issue 47: docs code blocks rely on earlier blocks' imports, which no page said."""
    text = " ".join((ROOT / "docs" / "index.md").read_text().split())
    assert "A guide's code blocks run in order, as one script" in text
    assert "a block uses the imports and the names of the blocks above it" in text
