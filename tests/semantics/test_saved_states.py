"""States saved by every earlier release (0.1.0, 0.2.0) resume in this one into exactly the items
they did then.

The states and the items that followed them were written by the release itself
(`saved_states.py`); here each pipeline is rebuilt, the state restored on the recorded number
of hosts, and the next items compared one by one. Version 2 states at every step of every
stage (the shape before version 3 kept one structure for a whole run) resume exactly too.
"""

import glob
import json
import os

import pytest

from tests.semantics.every_stage import PIPELINES as EVERY_STAGE
from tests.semantics.restore import plain
from tests.semantics.saved_states import pipelines, take, write_shards

DATA = os.path.join(os.path.dirname(__file__), "data")


def releases() -> dict[str, dict]:
    """version -> what that release saved (`data/states-<version>.json`)."""
    saved = {}
    for path in sorted(glob.glob(os.path.join(DATA, "states-*.json"))):
        with open(path) as f:
            content = json.load(f)
        saved[content["tpufeed"]] = content
    return saved


SAVED = releases()
CASES = [(version, case) for version, content in SAVED.items() for case in content["cases"]]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    folder = tmp_path_factory.mktemp("saved-states")
    write_shards(str(folder))
    return pipelines(str(folder))


def case_id(versioned):
    version, case = versioned
    hosts = case["hosts"]
    saved = "-".join(str(h) for h, _ in hosts) if isinstance(hosts, list) else str(hosts)
    return f"{version}-{case['pipeline']}-{saved}to{case['resumed_hosts']}"


def test_every_release_left_its_states():
    assert {"0.1.0", "0.2.0"} <= set(SAVED)


@pytest.mark.parametrize("versioned", CASES, ids=case_id)
def test_a_state_saved_by_an_earlier_release_resumes_exactly(built, versioned):
    _, case = versioned
    build = built[case["pipeline"]]
    hosts = case["resumed_hosts"]
    for host, expected in enumerate(case["following"]):
        got = take(build(host, hosts).iterator(case["saved"]), case["count"])
        assert got == expected, f"host {host} of {hosts}"


def test_the_saved_states_cover_what_a_state_can_hold():
    """Layers, carries, outputs of a record half delivered, pack rows and mixtures: every part
    of the format is among the saved states, so none of them can stop loading unnoticed."""
    keys = set()
    for _, case in CASES:
        for state in case["saved"] if isinstance(case["saved"], list) else [case["saved"]]:
            keys |= set(state)
    assert {"layers", "carries", "emitted", "pack", "mix"} <= keys


def as_version_2(state):
    """`state` as tpufeed wrote it before version 3: a cursor's `emitted`, `layers` and
    `carries` and the pack stage's part only where they held something, lists as lists."""
    state = json.loads(json.dumps(state))
    state["version"] = 2
    for cursor in [state, *state.get("mix", {}).get("components", [])]:
        if cursor.get("emitted") == 0:
            del cursor["emitted"]
        for key in ("layers", "carries"):
            if key in cursor:
                cursor[key] = json.loads(cursor[key])
                if not cursor[key]:
                    del cursor[key]
    pack = state.get("pack")
    if pack is not None:
        pack["rows"], loose = json.loads(pack["rows"]), json.loads(pack.pop("loose"))
        if loose:
            pack["loose"] = loose
        if not pack["rows"] and not loose:
            del state["pack"]
    return state


@pytest.mark.parametrize("name", sorted(EVERY_STAGE))
def test_a_version_2_state_at_any_step_resumes_exactly(name):
    """Before version 3 a state's keys changed from step to step (the first state had no
    `emitted` and no stage part): such states, at every step, continue as version 3's do."""
    ds = EVERY_STAGE[name]()
    with ds.iterator() as it:
        straight = [plain(item) for item in it]
    with ds.iterator() as it:
        states = [it.get_state()] + [it.get_state() for _ in it]
    old_shapes = {json.dumps(sorted(as_version_2(s))) for s in states}
    for step, state in enumerate(states):
        with ds.iterator(as_version_2(state)) as it:
            assert it.get_state() == state, f"step {step}: read back as version 3"
            assert [plain(item) for item in it] == straight[step:], f"step {step}"
    if name in ("flat_map", "pack-batch"):
        assert len(old_shapes) > 1  # the old shape did change: the test covers that
