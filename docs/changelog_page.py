"""A mkdocs hook (mkdocs.yml `hooks:`): the repository's CHANGELOG.md as the site's changelog
page, its links to `docs/...` pages made relative to the site, so the file stays the one
source and reads right on GitHub too."""

from __future__ import annotations

import pathlib
import re
from typing import Any

from mkdocs.structure.files import File, Files

CHANGELOG = pathlib.Path(__file__).resolve().parents[1] / "CHANGELOG.md"


def on_files(files: Files, config: Any) -> Files:
    text = re.sub(r"\]\(docs/", "](", CHANGELOG.read_text())
    files.append(File.generated(config, "changelog.md", content=text))
    return files
