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

    def in_workers():
        return make_dataset().workers(2, isolate=True)
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
    assert set(data) == {"schema", "stats", "verdict", "trace", "interrupted"}
    assert data["trace"] is None and data["interrupted"] is False
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
    assert "map(slow)" in verdict["suggestion"]
    # More workers where the run left a core idle (map(slow) sleeps), else not: the machine
    # running the test may be busy with other work.
    cores = verdict["cores"]
    if cores["busy"] is None or cores["cores"] - cores["busy"] >= 0.75:
        assert ".workers(" in verdict["suggestion"] and verdict["change"]["workers"] >= 1
    else:
        assert "no core is idle" in verdict["suggestion"] and verdict["change"] is None
    assert verdict["measured"] is False and verdict["tried"] is None
    assert verdict["first_batch_s"] > 0 and 0 <= verdict["wait_after_first_batch"] <= 1
    assert plot.stat().st_size > 10_000


def test_text_output_gives_a_verdict(target):
    result = bench(target, "--batches", "20", "--step-time", "0.05")
    assert result.returncode == 0, result.stderr
    assert "<- bottleneck" in result.stdout
    # The pipeline alone outruns a 50 ms step, but without prefetch the two take turns.
    assert "input-bound" in result.stdout and ".prefetch(2) (now 0)" in result.stdout
    assert "(not measured; run with --try to measure .prefetch(2))" in result.stdout


def test_a_bad_target_is_a_clear_error(tmp_path):
    result = bench(f"{tmp_path}/nothing.py:make")
    assert result.returncode == 2 and "no such file" in result.stderr


def test_without_a_step_time_the_verdict_is_the_rate_it_can_feed(target):
    result = bench(target, "--batches", "80")  # over 0.5 s (0.5 ms a record): long enough to judge
    assert result.returncode == 0, result.stderr
    assert "no --step-time: the pipeline alone delivers" in result.stdout
    assert "enough for a training step of" in result.stdout
    assert "input-bound" not in result.stdout and "local SSD" not in result.stdout
    result = bench(target, "--batches", "80", "--json")
    verdict = json.loads(result.stdout)["verdict"]
    assert verdict["input_bound"] is None and verdict["shortest_step_fed"] > 0
    assert verdict["too_short"] is False


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
    assert "records arrive already decoded" in text and "refused before the run" in text
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
    assert "\n1 record in 1 batch over " in "\n" + result.stdout


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
    write_array_records(tmp_path / "data.array_record", [b"a"], record_map=False)
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


def test_try_measures_the_advised_change_on_the_same_records(target):
    result = bench(target, "--batches", "20", "--step-time", "0.05", "--try", "--json")
    assert result.returncode == 0, result.stderr
    verdict = json.loads(result.stdout)["verdict"]
    assert verdict["change"] == {"prefetch": 2} and verdict["measured"] is True
    tried = verdict["tried"]
    assert tried["change"] == {"prefetch": 2} and tried["batches"] == 20
    assert tried["records"] == 20 * 16
    assert tried["ratio"] == pytest.approx(
        tried["after_records_per_s"] / tried["before_records_per_s"]
    )
    assert tried["outcome"] in {"it helps", "no effect", "it is slower"}
    text = bench(target, "--batches", "20", "--step-time", "0.05", "--try")
    assert text.returncode == 0, text.stderr
    assert "tried .prefetch(2) on the same 20 batches: " in text.stdout
    assert "records/s after the first batch (" in text.stdout


def test_workers_and_prefetch_flags_override_the_pipeline(target):
    result = bench(target, "--batches", "3", "--workers", "1", "--prefetch", "3", "--json")
    assert result.returncode == 0, result.stderr
    stats = json.loads(result.stdout)["stats"]
    assert (stats["workers"], stats["prefetch"]) == (1, 3)
    result = bench(target, "--batches", "3", "--workers", "0", "--json")
    assert json.loads(result.stdout)["stats"]["workers"] == 0


@pytest.mark.multiprocess
def test_trace_writes_the_timeline_of_every_process(tmp_path):
    (tmp_path / "pipeline.py").write_text(TARGET)
    result = bench(
        "pipeline.py:in_workers", "--batches", "12", "--step-time", "0.01", "--json",
        "--trace", "trace.json", cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["trace"] == "trace.json"
    events = json.loads((tmp_path / "trace.json").read_text())["traceEvents"]
    names = {e["args"]["name"] for e in events if e["name"] == "process_name"}
    assert "tpufeed consumer" in names
    consumer = next(e["pid"] for e in events if e.get("args", {}).get("name") == "tpufeed consumer")
    spans = [e for e in events if e["ph"] == "X"]
    waits = [e for e in spans if e["name"] == "wait for input" and e["pid"] == consumer]
    assert len(waits) == 12
    assert sum(e["name"] == "training step (slept)" for e in spans) == 12
    made = [e for e in spans if e["name"] == "batch" and e["cat"] == "stage"]
    assert made and all(e["pid"] != consumer for e in made)  # isolated: workers make batches
    assert sum(e["args"]["records"] for e in made) >= 12 * 16


@pytest.mark.parametrize(
    "args, says",
    [
        (["--step-tme", "1"], "unrecognized arguments: --step-tme 1 (--step-tme: did you mean --step-time?)"),
        (["--format", "arayrecord"], "invalid choice: 'arayrecord' (did you mean 'array_record'?"),
        (["--workers", "atuo"], "argument --workers: expected a whole number >= 0 or auto, got 'atuo' (did you mean auto?)"),
        (["--prefetch", "-1"], "argument --prefetch: expected a whole number >= 0 or auto, got '-1'"),
    ],
)  # fmt: skip
def test_a_typo_in_a_flag_or_its_value_names_what_was_meant(tmp_path, args, says):
    write_array_records(tmp_path / "data.array_record", [b"a"])
    result = bench("data.array_record", "--batches", "1", *args, cwd=tmp_path)
    assert result.returncode == 2 and result.stdout == ""
    assert says in result.stderr and "Traceback" not in result.stderr, result.stderr


def test_a_python_file_without_its_function_says_to_name_it(tmp_path):
    (tmp_path / "pipeline.py").write_text(TARGET)
    result = bench("pipeline.py", "--batches", "1", cwd=tmp_path)
    one_line_error(
        result,
        "pipeline.py is a Python file: name the function that returns the Dataset: "
        "pipeline.py:make_dataset (functions in pipeline.py: slow, make_dataset, in_workers)",
    )
    assert "cannot tell the format" not in result.stderr


def test_a_decode_transform_on_a_built_folder_is_one_line_naming_it(tmp_path):
    from tests.dataset_folder import make_dataset

    make_dataset(tmp_path / "built", [[{"x": np.arange(3) + i} for i in range(8)]])
    result = bench(
        "built", "--transform", "tpufeed.codec:decode", "--batches", "1", "--batch-size", "2",
        cwd=tmp_path,
    )  # fmt: skip
    one_line_error(
        result,
        "--transform tpufeed.codec:decode wants bytes (CodecError: cannot decode dict",
    )
    assert "arrive already decoded, as dicts of arrays: leave out --transform " in result.stderr
