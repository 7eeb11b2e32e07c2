"""A build's `--transform` functions: loaded by name, and what they raise named (issue 30)."""

import pytest

from tpufeed.beam.read.user_transforms import TransformChain, load_transform
from tpufeed.errors import InvalidArgumentError, TransformError

PREP = """
import sys

class Shout:
    def __call__(self, record):
        return record.upper()

shout = Shout()

def leave(record):
    sys.exit(4)

def interrupt(record):
    raise KeyboardInterrupt("from the transform")
"""


@pytest.fixture
def prep(tmp_path):
    path = tmp_path / "prep.py"
    path.write_text(PREP)
    return str(path)


def test_a_transform_class_is_refused_and_its_instance_taken(prep):
    with pytest.raises(InvalidArgumentError, match=r"Shout is a class; did you mean Shout\(\)\?"):
        load_transform(f"{prep}:Shout")
    assert TransformChain([f"{prep}:shout"])("abc", 0, 0) == ["ABC"]


def test_a_transform_that_exits_is_a_transform_error(prep):
    with pytest.raises(TransformError, match=r"--transform .*prep.py:leave raised SystemExit: 4"):
        TransformChain([f"{prep}:leave"])("abc", 0, 0)


def test_a_keyboard_interrupt_stops_the_build_where_it_may_be_ctrl_c(prep):
    import signal

    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt, match="from the transform"):
            TransformChain([f"{prep}:interrupt"])("abc", 0, 0)
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # no Ctrl-C can raise it now
        with pytest.raises(TransformError, match="raised KeyboardInterrupt"):
            TransformChain([f"{prep}:interrupt"])("abc", 0, 0)
    finally:
        signal.signal(signal.SIGINT, before)


def test_a_transform_is_made_with_literal_arguments_without_a_file_of_its_own(prep):
    """Issue 47: --transform took no arguments, so every CSV build (every column a string)
    needed a file of its own just to cast one column."""
    chain = TransformChain(["tpufeed.transforms:Cast({'label': 'int32', 'w': 'float32'})"])
    (out,) = chain({"label": "7", "w": "0.5", "text": "hi"}, 0, 0)
    assert out["label"] == 7 and out["label"].dtype == "int32" and out["w"].dtype == "float32"
    assert out["text"] == "hi"
    keep = load_transform("tpufeed.transforms:Select(keys=['text'])")
    assert keep({"text": "hi", "n": 1}) == {"text": "hi"}
    # A file's callable too, with colons inside its arguments; its path is made absolute.
    from tpufeed.beam.read.user_transforms import resolve_spec

    assert resolve_spec("prep.py:make('a:b', n=2)").endswith("/prep.py:make('a:b', n=2)")


@pytest.mark.parametrize(
    "spec, says",
    [
        (
            'tpufeed.transforms:Cast({"label": "int32"',
            "expected module:function or path/to/file.py:function, or a callable made with",
        ),
        (
            "tpufeed.transforms:Cast({'a': 'int32'}))",
            "cannot read its arguments \"({'a': 'int32'}))\": unmatched ')' at column 17",
        ),
        (
            "tpufeed.transforms:Cast({'label': int32})",
            "argument \"{'label': int32}\" is not a literal",
        ),
        (
            "tpufeed.transforms:Cast(__import__('os'))",
            "argument \"__import__('os')\" is not a literal",
        ),
        (
            "tpufeed.transforms:Cast({'a': 'nope'})",
            "calling it raised InvalidArgumentError: Cast: bad dtype",
        ),
        ("json:dumps(1)", "it returned str, not a callable transform"),
        (
            "tpufeed.transforms:Cast",
            "or make it here with literal arguments: tpufeed.transforms:Cast(...)",
        ),
    ],
)
def test_a_spec_that_cannot_be_made_names_its_text_and_why(spec, says):
    with pytest.raises(InvalidArgumentError) as refused:
        load_transform(spec)
    assert str(refused.value).startswith(f"--transform {spec!r}: ")
    assert says in str(refused.value)
