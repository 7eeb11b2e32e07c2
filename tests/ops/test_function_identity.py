"""What a function computes, told apart by its code, captured values, defaults and settings."""

from __future__ import annotations

import functools

import numpy as np

from tpufeed.ops.function_identity import function_identity
from tpufeed.transforms.image import Resize


def scaled(factor):
    return lambda x: x * factor


def helper(x):
    return x + 1


def calls_helper(x):
    return helper(x) * 2


def test_the_same_function_made_twice_is_the_same():
    assert function_identity(scaled(2)) == function_identity(scaled(2))
    assert function_identity(Resize(256)) == function_identity(Resize(256))


def test_code_captured_values_defaults_and_settings_tell_functions_apart():
    pairs = [
        (lambda x: x + 1, lambda x: x + 2),
        (scaled(2), scaled(3)),
        (scaled(np.ones(3)), scaled(np.zeros(3))),
        (functools.partial(pow, 2), functools.partial(pow, 3)),
        (Resize(256), Resize(224)),
    ]
    for a, b in pairs:
        assert function_identity(a) != function_identity(b)

    def with_default(x, k=1):
        return x + k

    before = function_identity(with_default)
    with_default.__defaults__ = (2,)
    assert function_identity(with_default) != before


def test_a_module_function_it_calls_is_part_of_it():
    global helper
    before = function_identity(calls_helper)
    original = helper
    try:
        helper = lambda x: x + 2  # noqa: E731
        assert function_identity(calls_helper) != before
    finally:
        helper = original
