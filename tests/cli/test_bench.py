"""`tpufeed bench`: runs a pipeline, names the bottleneck, suggests a fix, prints JSON and plots."""

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from tpufeed import codec
from tpufeed.sources.array_record import write_array_records

TARGET = textwrap.dedent("""
    import time, numpy as np, tpufeed

    def slow(e):
        time.sleep(0.0005)
        return e

    def make_dataset():
        return (tpufeed.Dataset.from_sequence(list(range(10**6)))
                .map(lambda i: np.full(16, i)).map(slow).batch(16).repeat())
""")


@pytest.fixture
def target(tmp_path):
    path = tmp_path / "pipeline.py"
    path.write_text(TARGET)
    return f"{path}:make_dataset"


def bench(*args, cwd=None, env=None):
    # -P: like the installed `tpufeed` script, without the working directory on sys.path.
    python = [sys.executable, "-P"] if sys.version_info >= (3, 11) else [sys.executable]
    return subprocess.run(
        [*python, "-m", "tpufeed.cli", "bench", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
        env=env,
    )


def one_line_error(result: subprocess.CompletedProcess, says: str) -> None:
    assert result.returncode == 2, result.stderr
    assert says in result.stderr, result.stderr
    assert "Traceback" not in result.stderr and len(result.stderr.splitlines()) == 1, result.stderr


def test_json_output_names_the_slow_stage_and_suggests_workers(target, tmp_path):
    plot = tmp_path / "bench.png"
    result = bench(
        target, "--seconds", "1.5", "--step-time", "0.001", "--json", "--plot", str(plot)
    )
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert set(data) == {"stats", "verdict"}
    stats, verdict = data["stats"], data["verdict"]
    for key in (
        "wall_seconds",
        "wait_fraction",
        "batches",
        "records",
        "records_per_s",
        "workers",
        "prefetch",
        "queue_depth",
        "memory_bytes",
        "errors",
        "bottleneck",
        "stages",
    ):
        assert key in stats
    for stage in stats["stages"].values():
        assert set(stage) == {"seconds", "records", "parallelism", "records_per_s"}
    assert stats["bottleneck"] == "map(slow)"
    assert verdict["input_bound"] is True
    assert ".workers(" in verdict["suggestion"] and "map(slow)" in verdict["suggestion"]
    assert plot.stat().st_size > 10_000


def test_text_output_gives_a_verdict(target):
    result = bench(target, "--batches", "20", "--step-time", "0.05")
    assert result.returncode == 0, result.stderr
    assert "<- bottleneck" in result.stdout
    # The pipeline alone outruns a 50 ms step, but without prefetch the two take turns.
    assert "input-bound" in result.stdout and ".prefetch(2) (now 0)" in result.stdout


def test_a_bad_target_is_a_clear_error(tmp_path):
    result = bench(f"{tmp_path}/nothing.py:make")
    assert result.returncode == 2 and "no such file" in result.stderr


def test_without_a_step_time_the_verdict_is_the_rate_it_can_feed(target):
    result = bench(target, "--batches", "20")
    assert result.returncode == 0, result.stderr
    assert "no --step-time: the pipeline alone delivers" in result.stdout
    assert "enough for a training step of" in result.stdout
    assert "input-bound" not in result.stdout and "local SSD" not in result.stdout
    result = bench(target, "--batches", "20", "--json")
    verdict = json.loads(result.stdout)["verdict"]
    assert verdict["input_bound"] is None and verdict["shortest_step_fed"] > 0


def test_a_transform_module_in_the_working_directory_is_found(tmp_path):
    """`--transform my_prep:fn` as the README writes it, and my_prep imports a module next to
    it; the `tpufeed` script does not put the working directory on sys.path by itself."""
    write_array_records(
        tmp_path / "data.array_record", [codec.encode({"x": np.arange(3) + i}) for i in range(16)]
    )
    (tmp_path / "my_prep.py").write_text(
        "from tpufeed import codec\nfrom my_prep_helpers import twice\n"
        "def decode(data):\n    return twice(codec.decode(data)['x'])\n"
    )
    (tmp_path / "my_prep_helpers.py").write_text("def twice(x):\n    return x * 2\n")
    result = bench(
        "data.array_record",
        "--transform",
        "my_prep:decode",
        "--batches",
        "3",
        "--batch-size",
        "4",
        "--json",
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["stats"]["records"] == 12


@pytest.mark.parametrize(
    "spec, says",
    [
        ("my_prep", "expected module:function or path/to/file.py:function"),
        ("no_such_module_xyz:decode", "cannot import no_such_module_xyz: ModuleNotFoundError"),
        ("broken_prep:decode", "cannot import broken_prep: ZeroDivisionError"),
        (
            "tpufeed.transforms:DecodeImage",  # issue 30: benched as 2M records/s of objects
            "DecodeImage is a class; did you mean DecodeImage()? --transform names a function "
            "or an instance: put `decodeimage = DecodeImage()` in a file",
        ),
    ],
)
def test_a_bad_transform_spec_is_a_clear_error(tmp_path, spec, says):
    write_array_records(tmp_path / "data.array_record", [b"a"])
    (tmp_path / "broken_prep.py").write_text("1 / 0\n")
    result = bench("data.array_record", "--transform", spec, "--batches", "1", cwd=tmp_path)
    assert result.returncode == 2
    assert says in result.stderr and "Traceback" not in result.stderr, result.stderr


def test_the_help_says_dataset_records_arrive_decoded():
    result = bench("--help")
    text = " ".join(result.stdout.split())
    assert "records arrive already decoded" in text and "fails with CodecError" in text
    assert "(default: 0.0)" in text and "(default: 256)" in text


def test_a_plain_folder_of_shards_is_a_target(tmp_path):
    folder = tmp_path / "shards"
    folder.mkdir()
    for i in range(2):
        write_array_records(
            folder / f"part-{i}.array_record",
            [codec.encode({"x": np.full(2, j)}) for j in range(8)],
        )
    result = bench(folder, "--batches", "2", "--batch-size", "4", "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["stats"]["records"] == 8


def test_counts_of_one_are_singular(tmp_path):
    write_array_records(tmp_path / "data.array_record", [b"a", b"b"])
    result = bench("data.array_record", "--batches", "1", "--batch-size", "1", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "\n1 record in 1 item over " in "\n" + result.stdout


@pytest.mark.parametrize(
    "option, value, wanted",
    [
        ("--step-time", "-1", "a number of seconds from 0 to 86400"),
        ("--step-time", "nan", "a number of seconds from 0 to 86400"),
        ("--step-time", "inf", "a number of seconds from 0 to 86400"),
        ("--seconds", "nan", "a finite number of seconds > 0"),
        ("--seconds", "-1", "a finite number of seconds > 0"),
        ("--seconds", "0", "a finite number of seconds > 0"),
        ("--seconds", "inf", "a finite number of seconds > 0"),
        ("--batches", "0", "a whole number >= 1"),
        ("--batches", "2.5", "a whole number >= 1"),
        ("--batch-size", "0", "a whole number >= 1"),
    ],
)
def test_numbers_out_of_range_are_usage_errors(tmp_path, option, value, wanted):
    """Refused before anything runs: a NaN --seconds never ended, a negative --step-time
    failed in time.sleep after the pipeline started."""
    write_array_records(tmp_path / "data.array_record", [b"a"])
    result = bench("data.array_record", option, value, cwd=tmp_path)
    assert result.returncode == 2 and result.stdout == ""
    assert f"argument {option}: expected {wanted}, got '{value}'" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize(
    "plot, says",
    [
        ("missing/bench.png", " cannot be written: its folder {tmp}/missing does not exist"),
        ("afile/bench.png", " cannot be written: {tmp}/afile is a file, not a folder"),
        ("afile/deeper/bench.png", " cannot be written: {tmp}/afile is a file, not a folder"),
        (".", " cannot be written: it is a folder; name a file in it, e.g. ./bench.png"),
        ("bench.xyz", ": matplotlib cannot write .xyz files; name a .png file"),
    ],
)
def test_a_plot_that_cannot_be_written_is_refused_before_the_run(tmp_path, plot, says):
    write_array_records(tmp_path / "data.array_record", [b"a"])
    (tmp_path / "afile").write_text("a file")
    result = bench("data.array_record", "--batches", "1", "--plot", plot, cwd=tmp_path)
    one_line_error(result, f"--plot {plot}{says.format(tmp=tmp_path)}")
    assert result.stdout == ""  # nothing ran
    assert sorted(os.listdir(tmp_path)) == ["afile", "data.array_record"]


def test_a_plot_that_fails_at_the_end_keeps_the_numbers(tmp_path):
    """The plot's folder is there when the bench starts and gone when it ends: the numbers are
    printed all the same, then one line says why the plot is missing."""
    (tmp_path / "plots").mkdir()
    (tmp_path / "pipeline.py").write_text(
        TARGET
        + textwrap.dedent(f"""
        import shutil

        def make_dataset_and_remove_plots():
            shutil.rmtree({str(tmp_path / "plots")!r})
            return make_dataset()
    """)
    )
    result = bench(
        "pipeline.py:make_dataset_and_remove_plots",
        "--batches",
        "3",
        "--json",
        "--plot",
        "plots/bench.png",
        cwd=tmp_path,
    )
    one_line_error(
        result,
        f"--plot plots/bench.png cannot be written: its folder {tmp_path / 'plots'} does not exist",
    )
    assert json.loads(result.stdout)["stats"]["batches"] == 3


def test_a_plot_without_matplotlib_says_how_to_install_it_before_the_run(tmp_path):
    write_array_records(tmp_path / "data.array_record", [b"a"])
    (tmp_path / "hide" / "matplotlib").mkdir(parents=True)  # as if it were not installed
    (tmp_path / "hide" / "matplotlib" / "__init__.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'matplotlib'\", name='matplotlib')\n"
    )
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(
            [str(tmp_path / "hide"), *filter(None, [os.environ.get("PYTHONPATH")])]
        ),
    }
    result = bench("data.array_record", "--batches", "1", "--plot", "b.png", cwd=tmp_path, env=env)
    one_line_error(
        result,
        "--plot needs matplotlib, which is not installed; install it with "
        "`pip install matplotlib`, or leave out --plot",
    )
    assert result.stdout == ""


def test_a_target_function_that_raises_is_one_named_error(tmp_path):
    """Found by the CLI fuzz (tests/faults): a target that needs arguments, or fails, was a
    bare traceback."""
    (tmp_path / "prep.py").write_text(
        "def decode(record):\n    return record\n\ndef broken():\n    return {}['x']\n"
    )
    for name, says in [("decode", "missing 1 required positional"), ("broken", "KeyError")]:
        result = bench(f"prep.py:{name}", "--batches", "1", cwd=tmp_path)
        assert result.returncode == 2, result.stderr
        assert result.stderr.startswith(f"tpufeed: error: target prep.py:{name} raised "), (
            result.stderr
        )
        assert says in result.stderr and "must return a tpufeed.Dataset" in result.stderr


@pytest.mark.parametrize("step", ["1e308", "86401"])
def test_a_step_time_beyond_a_day_is_a_usage_error(target, step):
    """Found by the CLI fuzz: --step-time 1e308 passed, then time.sleep raised OverflowError."""
    result = bench(target, "--batches", "1", "--step-time", step)
    assert result.returncode == 2 and "a number of seconds from 0 to 86400" in result.stderr
    assert "Traceback" not in result.stderr
