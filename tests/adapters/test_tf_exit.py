"""A process that stops iterating a `to_tf()` dataset early exits quietly (issue 47: TensorFlow
logged "Error occurred when finalizing GeneratorDataset iterator: FAILED_PRECONDITION: Python
interpreter state is not initialized" at exit, finalizing the generator after Python stopped).
Each case is a real process that exits with an iterator still alive."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("tensorflow")

SCRIPT = """
import numpy as np, tpufeed

ds = tpufeed.Dataset.from_sequence([{{"x": np.full(3, i)}} for i in range(40)]).batch(4)
tf_ds = ds.repeat().to_tf()
it = iter({iterated})
next(it)
print("stopped early")
"""


@pytest.mark.slow
@pytest.mark.parametrize(
    "iterated",
    ["tf_ds", "tf_ds.map(lambda b: b).prefetch(2)", "tf_ds.take(5).batch(2)"],
)
def test_exiting_with_an_iterator_alive_logs_no_finalizing_error(tmp_path, iterated):
    script = tmp_path / "early.py"
    script.write_text(textwrap.dedent(SCRIPT.format(iterated=iterated)))
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "stopped early"
    assert "Error occurred when finalizing GeneratorDataset iterator" not in done.stderr
    assert "Python interpreter state is not initialized" not in done.stderr
