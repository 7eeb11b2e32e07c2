"""Checkpoint state files: one file per process, read back by the same process count or all of
them by another, with errors that name the directory or the file; no Orbax needed."""

from __future__ import annotations

import re

import pytest

import tpufeed
from tpufeed.checkpoint.state_files import read_state, saved_count, states_to_restore, write_state


def test_same_count_takes_its_own_state_and_another_count_takes_every_state(tmp_path):
    states = [{"host": i, "hosts": 3} for i in range(3)]
    for i, state in enumerate(states):
        write_state(tmp_path, state, i, 3)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "process_0-of-3.json",
        "process_1-of-3.json",
        "process_2-of-3.json",
    ]  # no temporaries
    assert saved_count(tmp_path) == 3
    assert states_to_restore(tmp_path, 1, 3) == states[1]
    assert states_to_restore(tmp_path, 0, 2) == states == states_to_restore(tmp_path, 0, 1)


@pytest.mark.parametrize(
    "files, message",
    [
        ({}, "no tpufeed iterator state in"),
        ({"process_0-of-3.json": "{}", "process_2-of-3.json": "{}"}, "process(es) 1 of 3"),
        (
            {"process_0-of-1.json": "{}", "process_0-of-2.json": "{}", "process_1-of-2.json": "{}"},
            "runs with 1 and 2 processes",
        ),
    ],
)
def test_incomplete_or_mixed_directories_are_state_errors_naming_it(tmp_path, files, message):
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    with pytest.raises(tpufeed.StateError, match=re.escape(message)) as e:
        states_to_restore(tmp_path, 0, 2)
    assert str(tmp_path) in str(e.value)


def test_a_corrupt_state_file_is_a_state_error_naming_the_file(tmp_path):
    (tmp_path / "process_0-of-1.json").write_text('{"epoch": ')
    with pytest.raises(tpufeed.StateError, match="process_0-of-1.json is not a tpufeed"):
        read_state(tmp_path, 0, 1)


def test_a_state_json_cannot_hold_is_refused_before_anything_is_written(tmp_path):
    with pytest.raises(tpufeed.InvalidArgumentError, match="JSON cannot hold"):
        write_state(tmp_path, {"x": object()}, 0, 1)
    assert list(tmp_path.iterdir()) == []
