"""How `tpufeed inspect` shows a record's values (issue 47: float32 values printed with
float64's digits, cut in the middle of a number, scalars in two styles)."""

from __future__ import annotations

import numpy as np

from tpufeed.cli.field_values import SHOWN_CHARACTERS, record_fields, shown


def test_float32_values_have_float32_digits():
    fields = record_fields({"x": np.array([0.1, 1 / 3], np.float32)})
    assert fields["x"] == {"dtype": "float32", "shape": [2], "repr": "[0.1 , 0.33333334]"}


def test_numpy_and_python_scalars_are_written_alike():
    fields = record_fields({"a": np.int64(0), "b": np.array(0), "c": 0, "d": np.float32(-1)})
    assert fields["a"] == {"dtype": "int64", "shape": [], "repr": "0"}
    assert fields["b"]["repr"] == "0" and fields["c"] == {"type": "int", "repr": "0"}
    assert fields["d"] == {"dtype": "float32", "shape": [], "repr": "-1.0"}
    listed = record_fields({"l": [np.int64(3), np.float32(0.1)]})["l"]["repr"]
    assert listed == "[3, 0.1]"


def test_a_long_value_is_cut_after_a_whole_value_on_one_line():
    values = np.linspace(-1, 1, 16, dtype=np.float32).reshape(4, 4)
    text = record_fields({"x": values})["x"]["repr"]
    assert len(text) <= SHOWN_CHARACTERS and "\n" not in text and text.endswith(",...")
    kept = text[: -len(",...")].replace("[", "").replace("]", "").split(",")
    for number in kept:  # every number shown whole, as float32 prints it
        assert np.float32(number.strip()) in values
    arrays = record_fields({"l": [np.zeros((40, 40), np.uint8)]})["l"]["repr"]
    assert arrays == "[<uint8[40, 40]>]"  # a large array inside a list: its type, not its text


def test_text_with_no_place_to_cut_is_cut_at_the_limit():
    assert shown("x" * 100) == "x" * (SHOWN_CHARACTERS - 3) + "..."
    assert shown("a b\n c") == "a b c"
