"""What a function computes, told apart by its code, captured values, defaults and settings, the
module-level values its code reads and the user's own functions and classes it reaches, in any
of the user's modules; a value with no stable form refused by name.

The user's modules here are real files written to tmp_path and imported; an edit is a new text
of the file and a reload (bytecode is not cached, so a reload within one second compiles it)."""

from __future__ import annotations

import functools
import importlib
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from tpufeed.errors import InvalidArgumentError
from tpufeed.ops.function_identity import function_identity
from tpufeed.transforms.image import Resize


def scaled(factor):
    return lambda x: x * factor


def helper(x):
    return x + 1


def calls_helper(x):
    return helper(x) * 2


@pytest.fixture
def modules(tmp_path, monkeypatch):
    """`write(name, text)`: the user's module `name`, written to tmp_path and (re)imported."""
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    written: list[str] = []

    def write(name: str, text: str, load: bool = True):
        (tmp_path / f"{name}.py").write_text(textwrap.dedent(text))
        if not load:
            return None
        if name in sys.modules:
            return importlib.reload(sys.modules[name])
        written.append(name)
        return importlib.import_module(name)

    yield write
    for name in written:
        sys.modules.pop(name, None)


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


VALUES = {
    "a number": ("2", "3"),
    "a string": ("'a'", "'b'"),
    "bytes": ("b'a'", "b'b'"),
    "a tuple": ("(1, 2)", "(1, 3)"),
    "a dict": ("{'a': 1, 'b': [1, 2]}", "{'a': 1, 'b': [1, 3]}"),
    "a list": ("[1.5, 'x']", "[1.5, 'y']"),
    "a set": ("{'a', 'b'}", "{'a', 'c'}"),
    "an array": ("np.arange(6).reshape(2, 3)", "np.arange(6).reshape(3, 2)"),
    "an array's values": ("np.zeros(4, np.float32)", "np.ones(4, np.float32)"),
    "a frozen dataclass": ("Settings(np.ones(2), (1,))", "Settings(np.ones(2), (2,))"),
    "a numpy scalar": ("np.float32(1)", "np.float64(1)"),
}


@pytest.mark.parametrize("kind", VALUES)
def test_a_module_level_value_it_reads_is_part_of_it(modules, kind):
    def module(value: str) -> str:
        return f"""
            import dataclasses
            import numpy as np

            @dataclasses.dataclass(frozen=True)
            class Settings:
                weights: np.ndarray
                sizes: tuple

            VALUE = {value}
            OTHER = 1

            def fn(x):
                return (x, VALUE)
            """

    before, after = VALUES[kind]
    first = function_identity(modules("values", module(before)).fn)
    assert function_identity(modules("values", module(before)).fn) == first  # reloaded, same
    assert function_identity(modules("values", module(after)).fn) != first
    unread = module(before).replace("OTHER = 1", "OTHER = 2")
    assert function_identity(modules("values", unread).fn) == first  # a value it does not read


@pytest.mark.parametrize(
    "body",
    [
        "return [SCALE * v for v in x]",  # a comprehension's own code
        "return (lambda v: v * SCALE)(x)",  # a lambda's
        "def inner(v):\n        return v * SCALE\n    return inner(x)",  # a nested function's
        "return {k: SCALE for k in x}",
    ],
)
def test_values_read_by_nested_code_are_part_of_it(modules, body):
    def module(scale: int) -> str:
        return f"SCALE = {scale}\n\ndef fn(x):\n    {body}\n"

    first = function_identity(modules("nested", module(2)).fn)
    assert function_identity(modules("nested", module(3)).fn) != first


def test_values_and_functions_reached_through_the_users_modules_are_part_of_it(modules):
    """Each edit is loaded as a new process would (the module that imports from it again)."""
    modules("sub_values", "LIMIT = 10\n")
    modules(
        "helpers",
        """
        import sub_values
        SCALE = 2
        TABLE = {"a": 1}

        def offset(x):
            return x + TABLE["a"] + sub_values.LIMIT

        class Scaler:
            factor = 3

            def __call__(self, x):
                return x * self.factor
        """,
    )
    main_text = """
        import helpers
        from helpers import Scaler, offset

        def fn(x):
            return Scaler()(offset(x)) * helpers.SCALE + helpers.sub_values.LIMIT
        """
    first = function_identity(modules("main_module", main_text).fn)
    edits = [
        ("helpers", "SCALE = 2", "SCALE = 5"),  # an attribute chain: helpers.SCALE
        ("helpers", '"a": 1', '"a": 2'),  # a dict a helper function reads
        ("helpers", "factor = 3", "factor = 4"),  # a class attribute of a user class
        ("helpers", "return x * self.factor", "return x * self.factor + 1"),  # a method's code
        ("sub_values", "LIMIT = 10", "LIMIT = 11"),  # two modules down, by two paths
    ]
    texts = {name: open(sys.modules[name].__file__).read() for name in ("helpers", "sub_values")}
    for name, old, new in edits:
        modules(name, texts[name].replace(old, new))
        assert function_identity(modules("main_module", main_text).fn) != first, (name, new)
        modules(name, texts[name])
        assert function_identity(modules("main_module", main_text).fn) == first, (name, old)


@pytest.mark.parametrize(
    "body, edited",
    [
        ('getattr(dynamic_helpers, "SCALE")', "dynamic_helpers"),
        ('vars(dynamic_helpers)["SCALE"]', "dynamic_helpers"),
        ('globals()["SCALE"]', "dynamic_main"),
    ],
)
def test_a_value_named_by_a_string_is_part_of_it(modules, body, edited):
    texts = {
        "dynamic_helpers": "SCALE = 2\n",
        "dynamic_main": f"import dynamic_helpers\nSCALE = 2\n\ndef fn(x):\n    return x * {body}\n",
    }
    modules("dynamic_helpers", texts["dynamic_helpers"])
    first = function_identity(modules("dynamic_main", texts["dynamic_main"]).fn)
    modules(edited, texts[edited].replace("SCALE = 2", "SCALE = 3"))
    main = modules("dynamic_main", texts["dynamic_main"]) if edited != "dynamic_main" else None
    assert function_identity((main or sys.modules["dynamic_main"]).fn) != first


def test_an_import_inside_the_function_is_followed(modules):
    modules("lazy_helpers", "def f(x):\n    return x + 1\n")
    main = modules(
        "lazy_main",
        "def fn(x):\n    import lazy_helpers\n    return lazy_helpers.f(x)\n",
    )
    first = function_identity(main.fn)
    modules("lazy_helpers", "def f(x):\n    return x + 2\n")
    assert function_identity(main.fn) != first


def test_cycles_between_the_users_modules_end(modules):
    modules(
        "cycle_b", "import cycle_a\n\ndef g(x):\n    return cycle_a.f(x - 1) if x else 0\n", False
    )
    a = modules(
        "cycle_a",
        "import cycle_b\nSTEP = 1\n\ndef f(x):\n    return cycle_b.g(x) + STEP\n",
    )
    first = function_identity(a.f)
    assert function_identity(a.f) == first
    a = modules("cycle_a", open(a.__file__).read().replace("STEP = 1", "STEP = 2"))
    assert function_identity(a.f) != first


def test_libraries_are_known_by_their_version_and_their_objects_by_their_state(modules):
    import tokenizers
    from tokenizers import models

    def tokenizer(vocab: dict) -> tokenizers.Tokenizer:
        return tokenizers.Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))

    one, two = tokenizer({"a": 0, "[UNK]": 1}), tokenizer({"b": 0, "[UNK]": 1})
    assert function_identity(one.encode) == function_identity(
        tokenizer({"a": 0, "[UNK]": 1}).encode
    )
    assert function_identity(one.encode) != function_identity(two.encode)
    main = modules(
        "uses_numpy",
        "import numpy as np\n\ndef fn(x):\n    return np.add(x, 1).astype(np.float32)\n",
    )
    assert function_identity(main.fn) == function_identity(main.fn)
    assert function_identity(np.add) != function_identity(np.subtract)


UNSTABLE = {
    "an open file": ("open(__file__)", "TextIOWrapper"),
    "a lock": ("threading.Lock()", "lock"),
    "an object known by its address": ("object()", "object"),
    "a generator": ("(i for i in range(3))", "generator"),
}


@pytest.mark.parametrize("kind", UNSTABLE)
def test_a_value_with_no_stable_form_is_refused_by_name(modules, kind):
    value, type_name = UNSTABLE[kind]
    main = modules(
        "unstable",
        f"""
        import threading
        HANDLE = {value}

        def read_it(x):
            return (x, HANDLE)
        """,
    )
    with pytest.raises(InvalidArgumentError) as caught:
        function_identity(main.read_it, "map(read_it)")
    message = str(caught.value)
    for words in ("map(read_it)", "unstable.read_it", "HANDLE", type_name, "partial", 'key="'):
        assert words in message, words


def test_a_value_with_no_stable_form_deep_inside_is_named_by_its_path(modules):
    main = modules(
        "deep",
        """
        import threading
        CONFIG = {"sizes": [1, 2], "guard": [threading.Lock()]}

        def fn(x):
            return CONFIG["sizes"]
        """,
    )
    with pytest.raises(InvalidArgumentError, match=r"CONFIG\['guard'\]\[1\]|CONFIG\['guard'\]"):
        function_identity(main.fn, "map(fn)")


def test_a_closure_over_a_value_with_no_stable_form_is_refused():
    import threading

    lock = threading.Lock()
    with pytest.raises(InvalidArgumentError, match="lock"):
        function_identity(lambda x: (x, lock), "map(<lambda>)")


IN_A_PROCESS = """
import json, sys
sys.path.insert(0, sys.argv[1])
sys.dont_write_bytecode = True
import same_everywhere
from tpufeed.ops.function_identity import function_identity
print(json.dumps(function_identity(same_everywhere.fn).hex()))
"""


@pytest.mark.multiprocess
def test_the_same_code_has_the_same_identity_in_every_process(tmp_path):
    (tmp_path / "same_everywhere.py").write_text(
        textwrap.dedent(
            """
            import numpy as np
            WORDS = {"b", "a", "c", "d"}  # a set of strings: its order differs between runs
            TABLE = {"x": np.arange(4), "y": frozenset(WORDS)}

            def fn(x):
                return [w for w in sorted(WORDS) if TABLE["x"][0] <= x]
            """
        )
    )
    seen = set()
    for seed in ("1", "2", "3"):
        env = dict(os.environ, PYTHONHASHSEED=seed)
        out = subprocess.run(
            [sys.executable, "-c", IN_A_PROCESS, str(tmp_path)],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
        )
        assert out.returncode == 0, out.stderr
        seen.add(json.loads(out.stdout))
    assert len(seen) == 1
