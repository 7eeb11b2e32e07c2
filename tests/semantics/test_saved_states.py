"""States saved by tpufeed 0.1.0 resume in this release into exactly the items they did then.

The states and the items that followed them were written by the release itself
(`saved_states.py`); here each pipeline is rebuilt, the state restored on the recorded number
of hosts, and the next items compared one by one.
"""

import json
import os

import pytest

from tests.semantics.saved_states import FILE, pipelines, take, write_shards

DATA = os.path.join(os.path.dirname(__file__), "data")

with open(os.path.join(DATA, FILE)) as f:
    SAVED = json.load(f)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    folder = tmp_path_factory.mktemp("saved-states")
    write_shards(str(folder))
    return pipelines(str(folder))


def case_id(case):
    hosts = case["hosts"]
    saved = "-".join(str(h) for h, _ in hosts) if isinstance(hosts, list) else str(hosts)
    return f"{case['pipeline']}-{saved}to{case['resumed_hosts']}"


@pytest.mark.parametrize("case", SAVED["cases"], ids=case_id)
def test_a_state_saved_by_the_previous_release_resumes_exactly(built, case):
    build = built[case["pipeline"]]
    hosts = case["resumed_hosts"]
    for host, expected in enumerate(case["following"]):
        got = take(build(host, hosts).iterator(case["saved"]), case["count"])
        assert got == expected, f"host {host} of {hosts}"


def test_the_saved_states_cover_what_a_state_can_hold():
    """Layers, carries, outputs of a record half delivered, pack rows and mixtures: every part
    of the format is among the saved states, so none of them can stop loading unnoticed."""
    keys = set()
    for case in SAVED["cases"]:
        for state in case["saved"] if isinstance(case["saved"], list) else [case["saved"]]:
            keys |= set(state)
    assert {"layers", "carries", "emitted", "pack", "mix"} <= keys
