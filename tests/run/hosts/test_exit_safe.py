"""A process never aborts at its exit because one of tpufeed's daemon threads is inside the
run's native store client (tpufeed.run.hosts.exit_safe).

Without the guard, a thread inside jax.distributed's client when Python finalises ends the
process with SIGABRT ("terminate called after throwing an instance of ''"), after the user's
program finished: a JAX process of the multi-host fault tests did so in CI."""

from __future__ import annotations

import subprocess
import sys
import threading
import time

import pytest

from tpufeed.run.hosts import exit_safe

_PRELUDE = """
import socket, sys, threading, time
import jax

with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
jax.distributed.initialize(f"127.0.0.1:{port}", num_processes=1, process_id=0)
from jax._src.distributed import global_state

native = global_state.client


class Slow:
    '''jax's client whose writes first spend a second in its native code: in calls of 100 ms
    while it runs, in calls that fail at once after jax's exit hook shut it down.'''

    def __getattr__(self, name):
        return getattr(native, name)

    def key_value_set(self, *args):
        until = time.monotonic() + 1.0
        while time.monotonic() < until:
            try:
                native.blocking_key_value_get("never/set", 100)
            except Exception:
                pass
        return native.key_value_set(*args)
"""

_CASES = {
    # a daemon thread of tpufeed's own making, waiting in the client at exit
    "guarded": """
from tpufeed.run.hosts.exit_safe import Exiting, guarded
client = guarded(native)

def wait_forever():
    while True:
        try:
            client.blocking_key_value_get("never/set", 1000)
        except Exiting:
            return
        except Exception:
            pass

threading.Thread(target=wait_forever, daemon=True).start()
""",
    # the agreement's heartbeat writes its first beat at once
    "heartbeat": """
from tpufeed.run.hosts.key_value_agreement import KeyValueAgreement
agreement = KeyValueAgreement(Slow(), "jax", "t/", 1, 0, 60.0, 3.0, 31, lambda: True)
""",
    # the pod's summaries are shared 50 ms after it starts
    "pod": """
from tpufeed.run.hosts.pod import PodSharer
sharer = PodSharer(Slow(), "jax", 0, 1, 0.05, lambda: True)
""",
}


@pytest.mark.slow
@pytest.mark.multiprocess
@pytest.mark.parametrize("case", sorted(_CASES))
def test_a_thread_inside_jaxs_client_at_exit_does_not_abort_the_process(case):
    script = _PRELUDE + _CASES[case] + "time.sleep(0.3)\nprint('done', flush=True)\n"
    env_python = [sys.executable, "-c", script]
    done = subprocess.run(env_python, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "terminate called" not in done.stderr
    assert done.stdout.strip() == "done"


_HUNG = """
import time
from tpufeed.run.hosts import exit_safe


class Hung:
    def call(self):
        time.sleep(3600)  # a store that never answers (process 0 gone, network cut)


exit_safe.start(exit_safe.guarded(Hung()).call, (), "tpufeed-hung")
time.sleep(0.1)
"""


@pytest.mark.slow
@pytest.mark.multiprocess
def test_the_exit_waits_for_a_call_that_never_returns_for_a_bounded_time():
    began = time.monotonic()
    done = subprocess.run([sys.executable, "-c", _HUNG], capture_output=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert time.monotonic() - began < exit_safe.EXIT_WAIT_S + 20


class _Gate:
    """A client whose `call` returns once `opened` is set."""

    def __init__(self):
        self.opened = threading.Event()
        self.entered = threading.Event()

    def call(self, value):
        self.entered.set()
        self.opened.wait(10)
        return value

    name = "a gate"


def test_the_exit_waits_for_the_call_in_flight_then_refuses_new_ones(monkeypatch):
    monkeypatch.setattr(exit_safe, "_exiting", False)  # restored: this process goes on
    gate = _Gate()
    client = exit_safe.guarded(gate)
    assert exit_safe.guarded(client) is client and client.name == "a gate"
    results = []
    caller = threading.Thread(target=lambda: results.append(client.call(7)))
    caller.start()
    assert gate.entered.wait(10)
    exit_hook = threading.Thread(target=exit_safe._wait_at_exit)
    exit_hook.start()
    time.sleep(0.2)
    assert exit_hook.is_alive() and exit_safe.exiting()  # waiting for the call in flight
    gate.opened.set()
    exit_hook.join(10)
    caller.join(10)
    assert not exit_hook.is_alive() and results == [7]
    with pytest.raises(exit_safe.Exiting, match="this process exits"):
        client.call(8)
