"""The README's usage example runs as written, and the process exits cleanly."""

import pathlib
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent


def test_readme_example_runs(tmp_path):
    text = (ROOT / "README.md").read_text()
    code = re.findall(r"```python\n(.*?)```", text, re.S)[0]
    script = tmp_path / "example.py"
    script.write_text(code)
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                            timeout=120, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "(4, 4)" in result.stdout


def test_an_unclosed_prefetching_iterator_does_not_crash_the_interpreter_at_exit(tmp_path):
    script = tmp_path / "leave_open.py"
    script.write_text(
        "import numpy as np, tpufeed\n"
        "from tpufeed.sources.array_record import write_array_records\n"
        f"path = {str(tmp_path / 'a.array_record')!r}\n"
        "write_array_records(path, (bytes([i]) * 10 for i in range(100)))\n"
        "it = iter(tpufeed.Dataset.from_array_record(path).shuffle(0).repeat().prefetch(4))\n"
        "next(it)\n")
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert "terminate" not in result.stderr
