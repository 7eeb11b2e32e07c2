"""The environment workers start with: the user's, with numpy's BLAS on one thread unless the
user chose a count."""

import json
import os
import subprocess
import sys

import pytest

import tpufeed

pytestmark = [pytest.mark.multiprocess, pytest.mark.usefixtures("nothing_left_behind")]

_BLAS_SCRIPT = """
import json, os, sys
sys.path.insert(0, {root!r})
import numpy as np, tpufeed
from threadpoolctl import threadpool_info

def blas(i):
    np.dot(np.ones((64, 64)), np.ones((64, 64)))  # a BLAS call, in case threads start lazily
    info = [p["num_threads"] for p in threadpool_info() if p["internal_api"] == "openblas"]
    return np.array([os.getpid(), info[0] if info else -1,
                     int("OPENBLAS_NUM_THREADS" in os.environ)])

ds = tpufeed.Dataset.from_sequence(list(range(64))).map(blas).batch(8).workers(2, isolate=True)
rows = {{tuple(row) for b in ds for row in b.tolist()}}
from tpufeed.run.workers.forkserver import shared_server
server = shared_server()
print(json.dumps({{"threads": sorted({{t for pid, t, _ in rows if pid != os.getpid()}}),
                  "env_seen": sorted({{e for _, _, e in rows}}),
                  "server_threads": server and len(os.listdir(f"/proc/{{server.proc.pid}}/task"))}}))
"""


@pytest.mark.parametrize("fork_server", ["1", "0"])
@pytest.mark.parametrize("user_setting", [None, "2"])
def test_workers_run_numpy_blas_on_one_thread_unless_the_user_chose_a_count(
    user_setting, fork_server, tmp_path
):
    """OpenBLAS starts a spinning thread per core as numpy loads: in the fork server that took
    a core from the parent for the first ~0.1 s of every run. Workers get one BLAS thread
    (N workers already fill N cores), and the user's environment does not change."""
    root = os.path.dirname(os.path.dirname(tpufeed.__file__))
    script = tmp_path / "blas.py"
    script.write_text(_BLAS_SCRIPT.format(root=root))
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS", "OMP_NUM_THREADS")
    }
    env["TPUFEED_FORKSERVER"] = fork_server  # "0": workers are fresh interpreters
    if user_setting is not None:
        env["OPENBLAS_NUM_THREADS"] = user_setting
    proc = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    seen = json.loads(proc.stdout.strip().splitlines()[-1])
    if user_setting is None:
        assert seen == {
            "threads": [1],
            "env_seen": [0],
            "server_threads": 1 if fork_server == "1" else None,
        }
    else:
        assert seen["threads"] == [2] and seen["env_seen"] == [1]
