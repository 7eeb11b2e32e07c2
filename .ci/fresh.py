"""CI: the README's install commands resolve from plain PyPI, as on a fresh machine.

Each `pip install` line of the README's first code block is resolved as written, with pip's
local configuration switched off: no configuration file (`PIP_CONFIG_FILE=/dev/null`) and no
`PIP_*` variable, since CI's machines keep a CPU torch wheel in a find-links folder, an index of
their own and a cap on torch, any of which could hide a wheel that PyPI does not have. Nothing
installed counts (`--ignore-installed`), and pip only resolves (`--dry-run`): it reads the
wheels' metadata, which PyPI serves on its own (PEP 658), and downloads no multi-GB build. The
pip that does it is PyPI's newest, in a venv of its own: the pip of Python 3.11.7 (23.2)
downloads whole wheels to read their metadata, several GB for torch's CUDA libraries. Every
distribution chosen must come from the index over https (pip's default index, PyPI, is the only
one left), none from a local file but tpufeed itself (the checkout).

    python .ci/fresh.py          # every install line of the README
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def readme_installs(text: str) -> list[list[str]]:
    """The arguments after `pip install` of each install command in the README's first
    ```bash block (a command ends at `&&`, `;` or a comment)."""
    block = re.search(r"```bash\n(.*?)```", text, re.S)
    if block is None:
        sys.exit("README.md has no ```bash block: nothing to resolve")
    found = []
    for line in block.group(1).splitlines():
        words = shlex.split(line, comments=True)
        for start in (
            i for i, w in enumerate(words[:-1]) if words[i : i + 2] == ["pip", "install"]
        ):
            rest = words[start + 2 :]
            ends = [i for i, w in enumerate(rest) if w in ("&&", ";", "||")]
            found.append(rest[: ends[0]] if ends else rest)
    if not found:
        sys.exit("README.md's ```bash block has no `pip install`: nothing to resolve")
    return found


def plain_pip_environment() -> dict[str, str]:
    """This process's environment with pip's local configuration off."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    return env | {"PIP_CONFIG_FILE": os.devnull, "PIP_DISABLE_PIP_VERSION_CHECK": "1"}


def not_from_pypi(report: dict) -> list[str]:
    """The distributions of a `pip install --report` that do not come from the index (PyPI),
    but tpufeed."""
    found = []
    for item in report["install"]:
        name, url = item["metadata"]["name"], item["download_info"]["url"]
        if name != "tpufeed" and not url.startswith("https://"):
            found.append(f"{name} {item['metadata']['version']} from {url}")
    return found


def newest_pip(venv: Path) -> str:
    """A venv holding PyPI's newest pip; its python."""
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = str(venv / "bin" / "python")
    upgrade = [python, "-m", "pip", "install", "--quiet", "--upgrade", "pip"]
    subprocess.run(upgrade, check=True, env=plain_pip_environment())
    return python


def resolve(python: str, arguments: list[str]) -> list[str]:
    """Resolves `pip install ARGUMENTS` from plain PyPI; the problems found, as sentences."""
    with tempfile.TemporaryDirectory(prefix="fresh-") as scratch:
        report = Path(scratch) / "report.json"
        command = [python, "-m", "pip", "install", "--dry-run", "--ignore-installed"]
        command += ["--quiet", "--report", str(report), *arguments]
        start = time.monotonic()
        result = subprocess.run(
            command, cwd=ROOT, env=plain_pip_environment(), capture_output=True, text=True
        )
        took = time.monotonic() - start
        if result.returncode != 0:
            print(result.stdout[-3000:], result.stderr[-6000:], sep="\n")
            return [f"pip install {shlex.join(arguments)} does not resolve from PyPI"]
        chosen = json.loads(report.read_text())
    versions = {i["metadata"]["name"].lower(): i["metadata"]["version"] for i in chosen["install"]}
    shown = ", ".join(f"{n} {versions[n]}" for n in ("torch", "jax", "numpy") if n in versions)
    print(f"  {len(versions)} distributions in {took:.0f} s ({shown})", flush=True)
    return not_from_pypi(chosen)


def main() -> int:
    problems = []
    with tempfile.TemporaryDirectory(prefix="fresh-pip-") as scratch:
        python = newest_pip(Path(scratch) / "venv")
        for arguments in readme_installs((ROOT / "README.md").read_text()):
            print(f"[fresh] pip install {shlex.join(arguments)}", flush=True)
            problems += resolve(python, arguments)
    for problem in problems:
        print(f"FAILED: {problem}")
    print(f"fresh: {'every install resolves' if not problems else 'failed'} from plain PyPI")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
