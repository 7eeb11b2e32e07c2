"""The command line at its edges: mistakes a new user makes, interrupts, pipes, and the
README's benchmark commands; every case runs the real `tpufeed` command in a subprocess."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def tpufeed_command() -> list[str]:
    """How the installed `tpufeed` script starts: without the working directory on sys.path
    (`python -m` would put it there, and hide what a user of the script sees)."""
    if sys.version_info >= (3, 11):
        return [sys.executable, "-P", "-m", "tpufeed.cli"]
    script = os.path.join(os.path.dirname(sys.executable), "tpufeed")
    if not os.path.exists(script):
        pytest.skip("no tpufeed script next to this Python, and no -P before Python 3.11")
    return [script]


def tpufeed(*args: object, cwd: object = None, timeout: float = 120,
            **kwargs: object) -> subprocess.CompletedProcess:
    return subprocess.run([*tpufeed_command(), *map(str, args)], cwd=cwd, capture_output=True,
                          text=True, timeout=timeout, **kwargs)


def test_no_benchmark_module_shadows_the_standard_library():
    """`python benchmarks/x.py` puts benchmarks/ first on sys.path: a profile.py there broke
    every `import cProfile` (Beam imports it)."""
    names = [name[:-3] for name in os.listdir(os.path.join(ROOT, "benchmarks"))
             if name.endswith(".py")]
    assert [n for n in names if n in sys.stdlib_module_names] == []


@pytest.mark.slow
def test_the_readme_build_benchmark_runs_as_a_script(tmp_path):
    pytest.importorskip("apache_beam")
    result = subprocess.run([sys.executable, "benchmarks/build.py", "--records", "40",
                             "--num-shards", "2", "--workdir", str(tmp_path)],
                            cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "tpufeed build (FnApiRunner, 1 worker)" in result.stdout


def test_the_profiler_says_how_to_install_py_spy():
    result = subprocess.run([sys.executable, "-m", "benchmarks.profiling", "--records", "10"],
                            cwd=ROOT, capture_output=True, text=True, timeout=120,
                            env={**os.environ, "PATH": ""})
    assert result.returncode == 2
    assert "py-spy is not installed" in result.stderr and ".[dev]" in result.stderr
    assert "Traceback" not in result.stderr
