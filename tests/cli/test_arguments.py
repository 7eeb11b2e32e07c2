"""`tpufeed.cli.arguments`: shared argument types and the usage errors that name what was meant."""

import argparse

import pytest

from tpufeed.cli.arguments import (
    Parser,
    close_match,
    count_or_auto,
    positive_or_auto,
    unrecognized,
)


def test_count_or_auto():
    assert count_or_auto("auto") == "auto" and count_or_auto("0") == 0 and count_or_auto("8") == 8
    for text, says in [("atuo", "(did you mean auto?)"), ("-1", "got '-1'"), ("2.5", "'2.5'")]:
        with pytest.raises(argparse.ArgumentTypeError, match="a whole number >= 0 or auto") as e:
            count_or_auto(text)
        assert says in str(e.value)
    with pytest.raises(argparse.ArgumentTypeError) as e:
        count_or_auto("lots")
    assert "did you mean" not in str(e.value)


def test_positive_or_auto_is_build_workers():
    assert positive_or_auto("auto") == "auto" and positive_or_auto("3") == 3
    for text in ("0", "-2", "atuo"):
        with pytest.raises(argparse.ArgumentTypeError, match="a whole number >= 1 or auto"):
            positive_or_auto(text)


def test_close_match():
    assert close_match("--step-tme", ["--step-time", "--seconds"]) == "--step-time"
    assert close_match("--zzz", ["--step-time", "--seconds"]) is None


def test_unrecognized_names_the_option_meant():
    parser = Parser(prog="p")
    parser.add_argument("--batch-size")
    message = unrecognized(parser, ["--batch-sise=3", "extra", "--nothing-like-it"])
    assert message == (
        "unrecognized arguments: --batch-sise=3 extra --nothing-like-it "
        "(--batch-sise: did you mean --batch-size?)"
    )


def test_an_invalid_choice_names_the_one_meant(capsys):
    parser = Parser(prog="p")
    parser.add_argument("--format", choices=["array_record", "tfrecord"])
    with pytest.raises(SystemExit):
        parser.parse_args(["--format", "tfrecrod"])
    assert (
        "invalid choice: 'tfrecrod' (did you mean 'tfrecord'? choose from"
        in capsys.readouterr().err
    )
    with pytest.raises(SystemExit):
        parser.parse_args(["--format", "zzz"])
    assert "invalid choice: 'zzz' (choose from" in capsys.readouterr().err


@pytest.mark.parametrize(
    "args, note",
    [
        (["--input", "in.jsonl", "--ouput", "ds"], "(--ouput: did you mean --output?)"),
        (["--inptu=in.jsonl", "--output", "ds"], "(--inptu: did you mean --input?)"),
    ],
)
def test_a_misspelt_required_build_option_is_named(args, note, capsys):
    """Issue 47: `build --ouput` said only that --output is required (build passes options it
    does not know to Beam, so the misspelling itself is no usage error)."""
    from tpufeed.cli.program import main

    with pytest.raises(SystemExit) as exited:
        main(["build", *args])
    assert exited.value.code == 2
    err = capsys.readouterr().err.splitlines()[-1]
    assert err.startswith("tpufeed build: error: the following arguments are required: --")
    assert err.endswith(note)
