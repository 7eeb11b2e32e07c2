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
