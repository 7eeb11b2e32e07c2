"""The command line at its edges: mistakes a new user makes, interrupts and pipes; every case
runs the real `tpufeed` command in a subprocess (the README's benchmark commands:
tests/repository/test_benchmark_scripts.py)."""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from tests.processes import default_ctrl_c


def tpufeed_command() -> list[str]:
    """How the installed `tpufeed` script starts: without the working directory on sys.path
    (`python -m` would put it there, and hide what a user of the script sees)."""
    if sys.version_info >= (3, 11):
        return [sys.executable, "-P", "-m", "tpufeed.cli"]
    script = os.path.join(os.path.dirname(sys.executable), "tpufeed")
    if not os.path.exists(script):
        pytest.skip("no tpufeed script next to this Python, and no -P before Python 3.11")
    return [script]


def tpufeed(
    *args: object, cwd: object = None, timeout: float = 120, **kwargs: object
) -> subprocess.CompletedProcess:
    """Runs the `tpufeed` command; one that outlives `timeout` fails the test with the stacks
    of its processes (py-spy, the dev extra's) and what it printed, then is killed."""
    command = [*tpufeed_command(), *map(str, args)]
    with subprocess.Popen(
        command, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kwargs
    ) as proc:
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            stacks = process_stacks(proc.pid)
            proc.kill()
            out, err = proc.communicate()
            pytest.fail(
                f"{' '.join(command[-len(args) :])} still ran after {timeout} s\n"
                f"stderr:\n{err[-3000:]}\nstacks:\n{stacks}"
            )
    return subprocess.CompletedProcess(command, proc.returncode, out, err)


def process_stacks(pid: int) -> str:
    """The Python stacks of process `pid` and its children, as py-spy dumps them."""
    import psutil

    dumps = []
    try:
        procs = [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        return "(the process is gone)"
    for proc in procs:
        try:
            done = subprocess.run(
                ["py-spy", "dump", "--pid", str(proc.pid)],
                capture_output=True,
                text=True,
                timeout=30,
            )
            dumps.append(
                f"--- {proc.pid} {' '.join(proc.cmdline())[:200]}\n{done.stdout}{done.stderr}"
            )
        except (OSError, subprocess.TimeoutExpired, psutil.Error) as e:
            dumps.append(f"--- {proc.pid}: no stack ({e})")
    return "\n".join(dumps)[-20000:]


no_proc = pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs Linux /proc")


def one_line_error(result: subprocess.CompletedProcess, says: str) -> None:
    assert result.returncode == 2, result.stderr
    assert says in result.stderr, result.stderr
    assert "Traceback" not in result.stderr and len(result.stderr.splitlines()) == 1, result.stderr


def write_jsonl(path, n: int) -> str:
    with open(path, "w") as f:
        for i in range(n):
            f.write(json.dumps({"id": i, "text": "x" * i}) + "\n")
    return str(path)


def built(tmp_path, num_shards: int = 3, n: int = 30) -> str:
    """A dataset written by the in-process build, in tmp_path/ds."""
    pytest.importorskip("apache_beam")
    from tpufeed.beam import BuildConfig, build

    out = str(tmp_path / "ds")
    build(
        BuildConfig(
            inputs=(write_jsonl(tmp_path / "in.jsonl", n),), output=out, num_shards=num_shards
        )
    )
    return out


# tpufeed build: the output, options, interrupts, progress


def test_an_output_that_is_a_file_is_refused_before_beam_runs(tmp_path):
    pytest.importorskip("apache_beam")
    write_jsonl(tmp_path / "in.jsonl", 3)
    (tmp_path / "taken").write_text("not a folder")
    for output, says in (
        ("taken", "--output taken is a file"),
        ("taken/ds", f"cannot be made: {tmp_path / 'taken'} is a file"),
    ):
        result = tpufeed("build", "--input", "in.jsonl", "--output", output, cwd=tmp_path)
        assert result.returncode == 2 and says in result.stderr, result.stderr
        assert "Traceback" not in result.stderr and len(result.stderr.splitlines()) == 1
    assert (tmp_path / "taken").read_text() == "not a folder"


def test_a_transform_class_without_parentheses_is_refused_before_beam_runs(tmp_path):
    """Issue 30: the class itself was applied to each record, making DecodeImage objects."""
    pytest.importorskip("apache_beam")
    write_jsonl(tmp_path / "in.jsonl", 3)
    result = tpufeed(
        "build", "--input", "in.jsonl", "--output", "ds", "--transform",
        "tpufeed.transforms:DecodeImage", cwd=tmp_path,
    )  # fmt: skip
    one_line_error(result, "DecodeImage is a class; did you mean DecodeImage()?")
    assert "pass file.py:decodeimage" in result.stderr
    assert not (tmp_path / "ds").exists()


@no_proc
def test_an_output_where_no_folder_can_be_made_is_refused_before_beam_runs(tmp_path):
    pytest.importorskip("apache_beam")
    write_jsonl(tmp_path / "in.jsonl", 3)
    result = tpufeed("build", "--input", "in.jsonl", "--output", "/proc/tpufeed-ds", cwd=tmp_path)
    one_line_error(
        result,
        "--output /proc/tpufeed-ds cannot be made in /proc: No such file or "
        "directory; name a folder on a writable disk",
    )
    assert "building" not in result.stderr


def test_an_output_on_a_read_only_disk_is_refused_before_beam_runs(tmp_path, read_only_dir):
    pytest.importorskip("apache_beam")
    write_jsonl(tmp_path / "in.jsonl", 3)
    for output in (read_only_dir, read_only_dir / "new" / "ds"):
        result = tpufeed("build", "--input", "in.jsonl", "--output", output, cwd=tmp_path)
        one_line_error(result, f"--output {output} cannot be ")
        assert "Read-only file system" in result.stderr and "building" not in result.stderr


def test_checking_the_output_leaves_no_folder_behind_when_the_build_is_refused(tmp_path):
    pytest.importorskip("apache_beam")
    result = tpufeed("build", "--input", "nothing-*.jsonl", "--output", "new/ds", cwd=tmp_path)
    one_line_error(result, "nothing-*.jsonl")
    assert os.listdir(tmp_path) == []


@pytest.mark.slow
def test_an_output_that_stops_being_a_folder_is_one_line_and_keeps_the_file(tmp_path):
    """The output checked writable at the start can stop being a folder mid-build: here a
    transform replaces it by a file. The new dataset is not switched in over it."""
    pytest.importorskip("apache_beam")
    write_jsonl(tmp_path / "in.jsonl", 5)
    (tmp_path / "clobber.py").write_text(
        textwrap.dedent("""
        import os, shutil
        def clobber(record):
            if not os.path.isfile("ds"):
                shutil.rmtree("ds", ignore_errors=True)
                with open("ds", "w") as f:
                    f.write("not a folder")
            return record
    """)
    )
    result = tpufeed(
        "build",
        "--input",
        "in.jsonl",
        "--output",
        "ds",
        "--transform",
        "clobber.py:clobber",
        "-q",
        cwd=tmp_path,
    )
    one_line_error(
        result,
        f"--output {tmp_path / 'ds'} stopped being a folder during the build (it is a file "
        "now); the new dataset was not published",
    )
    assert (tmp_path / "ds").read_text() == "not a folder"
    assert sorted(os.listdir(tmp_path)) == ["clobber.py", "ds", "in.jsonl"]


@pytest.mark.parametrize(
    "args, says",
    [
        (
            ["build", "--input", "in.jsonl", "--output", "ds", "--num-shards", "0"],
            "argument --num-shards: expected a whole number >= 1, got '0'",
        ),
        (
            ["build", "--input", "in.jsonl", "--output", "ds", "--num-shards", "-2"],
            "argument --num-shards: expected a whole number >= 1, got '-2'",
        ),
        (
            ["build", "--input", "in.jsonl", "--output", "ds", "--max-bad", "-1"],
            "argument --max-bad: expected a whole number >= 0, got '-1'",
        ),
        (
            ["quickstart", "--epochs", "0"],
            "argument --epochs: expected a whole number >= 1, got '0'",
        ),
    ],
)
def test_numbers_out_of_range_are_usage_errors(tmp_path, args, says):
    result = tpufeed(*args, cwd=tmp_path)
    assert result.returncode == 2 and says in result.stderr, result.stderr
    assert "Traceback" not in result.stderr and os.listdir(tmp_path) == []


@pytest.mark.slow
def test_ctrl_c_during_a_build_prints_one_line_and_exits_130(tmp_path):
    pytest.importorskip("apache_beam")
    write_jsonl(tmp_path / "in.jsonl", 200)
    started = tmp_path / "started"
    # From the second record: the build runs the first through the transforms before the
    # pipeline starts, to learn the schema every record is checked against.
    (tmp_path / "slow.py").write_text(
        "import pathlib, time\n"
        f"def slow(r):\n    if r['id']:\n        pathlib.Path({str(started)!r}).touch()\n"
        "    time.sleep(0.05)\n    return r\n"
    )
    proc = subprocess.Popen(
        [
            *tpufeed_command(),
            "build",
            "--input",
            "in.jsonl",
            "--output",
            "ds",
            "--transform",
            "slow.py:slow",
        ],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=default_ctrl_c,
    )
    try:
        deadline = time.monotonic() + 60
        while not started.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 130, err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err
    assert err.splitlines()[-1] == (
        "tpufeed: interrupted: the build was stopped: ds is as it was (the new dataset's "
        "files were removed)"
    )
    assert sorted(os.listdir(tmp_path)) == ["in.jsonl", "slow.py", "started"]


@pytest.mark.parametrize(
    "given, meant",
    [
        (["--transfrom", "prep.py:fn"], "--transform"),
        (["--num_shards", "4"], "--num-shards"),  # the underscore spelling of a tpufeed option
        (["--max_bad=3"], "--max-bad"),
        (["--temp_locaton", "/tmp"], "--temp_location"),  # a typo of a Beam option
        (["--frobnicate"], None),  # like nothing either knows
    ],
)
def test_unknown_build_options_are_refused_with_the_option_meant(tmp_path, given, meant):
    pytest.importorskip("apache_beam")
    write_jsonl(tmp_path / "in.jsonl", 3)
    result = tpufeed("build", "--input", "in.jsonl", "--output", "ds", *given, cwd=tmp_path)
    name = given[0].split("=")[0]
    assert result.returncode == 2
    hint = f" (did you mean {meant}?)" if meant else ". Options that are not tpufeed build's"
    assert f"unknown option {name}{hint}" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr and not (tmp_path / "ds").exists()


@pytest.mark.slow
def test_beam_options_pass_through_and_the_build_reports_totals(tmp_path):
    """Also: no `apitools not found` warning, and counts in the singular where they are 1."""
    pytest.importorskip("apache_beam")
    write_jsonl(tmp_path / "in.jsonl", 5)
    result = tpufeed(
        "build",
        "--input",
        "in.jsonl",
        "--output",
        "ds",
        "--runner",
        "FnApiRunner",
        "--direct_num_workers",
        "1",
        "--temp_location",
        str(tmp_path / "beam-tmp"),
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    assert "apitools" not in result.stderr and "WARNING" not in result.stderr
    assert "building ds from 1 input file into 1 array_record shard\n" in result.stderr
    assert "read in.jsonl: 5 records (input 1 of 1; 100% of the input bytes)" in result.stderr
    assert (
        "wrote data-00000-of-00001.array_record: 5 records, 131,072 bytes (1 shard written, 100%)"
    ) in result.stderr
    # Issue 47: the time said nothing of what it leaves out (the command's start-up).
    assert re.search(
        r"\ntime +[\d.]+ s \([\d,]+ records/s\): the plan, Beam's pipeline and the checks "
        r"\(the command's start-up before them is not counted\)\n",
        result.stdout,
    )
    from tpufeed import Dataset

    assert [r["id"] for r in Dataset.open(tmp_path / "ds").source.__getitems__(range(5))] == list(
        range(5)
    )


@pytest.mark.slow
def test_a_build_into_a_dataset_needs_overwrite(tmp_path):
    out = built(tmp_path, num_shards=3)
    manifest = (tmp_path / "ds" / "manifest.json").read_bytes()
    result = tpufeed("build", "--input", "in.jsonl", "--output", "ds", cwd=tmp_path)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert (
        "--output ds already holds a dataset (ds/manifest.json); pass --overwrite" in result.stderr
    )
    assert (tmp_path / "ds" / "manifest.json").read_bytes() == manifest
    from tpufeed.beam import BuildConfig, build
    from tpufeed.errors import InvalidArgumentError

    config = dict(inputs=(str(tmp_path / "in.jsonl"),), output=out, num_shards=2)
    with pytest.raises(InvalidArgumentError, match="pass --overwrite"):
        build(BuildConfig(**config))
    assert build(BuildConfig(**config, overwrite=True))["shards"] == 2
    assert sorted(os.listdir(out)) == [
        "data-00000-of-00002.array_record",
        "data-00001-of-00002.array_record",
        "manifest.json",
    ]


@pytest.mark.parametrize(
    "inputs, says",
    [
        ({"in.jsonl": ""}, "its --input files hold no records (empty files, a CSV of only"),
        ({"in.csv": "a,b\n"}, "its --input files hold no records"),
        (
            {"in.csv": "a,b\n1,2\n3,4\n", "drop.py": "def drop(record):\n    return None\n"},
            "2 input records read, none kept: 2 dropped by --transform, 0 skipped as bad",
        ),
    ],
)
def test_a_build_that_makes_no_record_is_refused_and_keeps_the_output(tmp_path, inputs, says):
    """Issue 47: a build over empty input succeeded with 0 records, silently."""
    pytest.importorskip("apache_beam")
    out = built(tmp_path, num_shards=1, n=3)  # a dataset the refused build must leave as it is
    manifest = (tmp_path / "ds" / "manifest.json").read_bytes()
    for name, text in inputs.items():
        (tmp_path / name).write_text(text)
    data = next(name for name in inputs if not name.endswith(".py"))
    transform = ["--transform", "drop.py:drop"] if "drop.py" in inputs else []
    result = tpufeed(
        "build", "--input", data, "--output", out, "--overwrite", *transform, "-q", cwd=tmp_path
    )
    one_line_error(result, f"the build made no records: {says}")
    assert result.stderr.rstrip().endswith("nothing was written, the output is as it was")
    assert (tmp_path / "ds" / "manifest.json").read_bytes() == manifest
    assert not [n for n in os.listdir(tmp_path) if n.startswith(".tpufeed")]


def test_build_errors_carry_no_beam_step_names(tmp_path):
    """Issue 47: a bad record or a failing transform ended in "[while running
    'ReadBlock/ParDo(ReadBlock)']", a name of the build's insides."""
    pytest.importorskip("apache_beam")
    (tmp_path / "mixed.jsonl").write_text('{"a": 1}\n{"a": "x"}\n')
    result = tpufeed("build", "--input", "mixed.jsonl", "--output", "ds", "-q", cwd=tmp_path)
    one_line_error(result, "mixed.jsonl line 2: key 'a' is str 'x', but it is int in the first")
    assert result.stderr.endswith("(pass --max-bad N to skip up to N bad records)\n")
    (tmp_path / "bad.py").write_text(
        "def bad(record):\n    raise ValueError('no ' + record['a'])\n"
    )
    (tmp_path / "one.csv").write_text("a\nb\n")
    result = tpufeed(
        "build", "--input", "one.csv", "--output", "ds", "--transform", "bad.py:bad", "-q",
        cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 2 and "while running" not in result.stderr, result.stderr
    assert result.stderr.endswith("ValueError: no b\n"), result.stderr
    assert not (tmp_path / "ds").exists()


def test_a_csv_build_casts_its_columns_with_a_transform_made_on_the_command_line(tmp_path):
    """Issue 47: --transform took no arguments, so every CSV build needed a file of its own."""
    pytest.importorskip("apache_beam")
    (tmp_path / "in.csv").write_text("text,label\nhi,1\nyo,0\n")
    cast = "tpufeed.transforms:Cast({'label': 'int32'})"
    result = tpufeed(
        "build", "--input", "in.csv", "--output", "ds", "--transform", cast, "-q", cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr
    from tpufeed import Dataset

    rows = list(Dataset.open(tmp_path / "ds"))
    assert [int(r["label"]) for r in rows] == [1, 0] and rows[0]["label"].dtype == "int32"
    assert [r["text"] for r in rows] == ["hi", "yo"]


@pytest.mark.slow
@pytest.mark.multiprocess
def test_a_bad_record_met_by_a_beam_worker_process_is_the_same_one_line_error(tmp_path):
    """With --workers N the error came back from the worker as a RuntimeError holding its
    traceback as text: the command ended in a traceback and exit 1 (found with issue 47)."""
    pytest.importorskip("apache_beam")
    (tmp_path / "mixed.jsonl").write_text('{"a": 1}\n{"a": "x"}\n')
    result = tpufeed(
        "build", "--input", "mixed.jsonl", "--output", "ds", "-q", "--workers", "2",
        cwd=tmp_path, timeout=240,
    )  # fmt: skip
    assert result.returncode == 2, result.stderr[-3000:]
    last = result.stderr.splitlines()[-1]
    assert last.startswith("tpufeed: error: mixed.jsonl line 2: key 'a' is str 'x', but it is")
    assert last.endswith("(pass --max-bad N to skip up to N bad records)")
    # Beam's worker prints the step's traceback to its stderr itself (sdk_worker._execute);
    # its logs of it are not printed again, and the one line ends the output.
    assert "ERROR:apache_beam" not in result.stderr and "while running" not in last
    assert not (tmp_path / "ds").exists()


def test_shards_a_build_would_replace_need_overwrite_too(tmp_path):
    pytest.importorskip("apache_beam")
    from tpufeed.beam import BuildConfig, build
    from tpufeed.errors import InvalidArgumentError

    os.makedirs(tmp_path / "ds")
    (tmp_path / "ds" / "data-00000-of-00001.array_record").write_bytes(b"mine")
    with pytest.raises(
        InvalidArgumentError,
        match=r"holds 1 file this build would replace "
        r"\(data-00000-of-00001\.array_record\)",
    ):
        build(
            BuildConfig(
                inputs=(write_jsonl(tmp_path / "in.jsonl", 2),), output=str(tmp_path / "ds")
            )
        )
    assert (tmp_path / "ds" / "data-00000-of-00001.array_record").read_bytes() == b"mine"


def test_ctrl_c_while_a_command_loads_prints_one_line_and_exits_130(tmp_path):
    """A Ctrl-C that lands while the command's modules import (here: forced in the import of
    tpufeed.cli.bench, which the parser needs) is main()'s to report."""
    script = textwrap.dedent("""
        import sys
        import tpufeed

        class InterruptImport:
            def find_spec(self, name, path=None, target=None):
                if name == "tpufeed.cli.bench":
                    raise KeyboardInterrupt
                return None

        sys.meta_path.insert(0, InterruptImport())
        from tpufeed.cli import main
        sys.exit(main(["inspect", "x.array_record"]))
    """)
    result = subprocess.run(
        [sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 130 and result.stderr == "tpufeed: interrupted\n", result.stderr


# tpufeed cache


@no_proc
def test_cache_clear_where_no_folder_can_be_made_is_one_line():
    result = tpufeed("cache", "clear", "--dir", "/proc")
    one_line_error(
        result,
        "cannot clear the shard cache directory /proc (/proc/shards): No such "
        "file or directory; pass --dir",
    )


def test_cache_clear_on_a_read_only_disk_is_one_line(read_only_dir):
    result = tpufeed("cache", "clear", "--dir", read_only_dir)
    one_line_error(result, f"cannot write to the shard cache directory {read_only_dir}")
    result = tpufeed("cache", "ls", "--dir", read_only_dir)
    assert result.returncode == 0 and result.stdout == f"0 shards, 0 bytes in {read_only_dir}\n"


def test_bench_refuses_a_plot_on_a_read_only_disk_before_it_runs(tmp_path, read_only_dir):
    from tpufeed.sources.array_record import write_array_records

    write_array_records(tmp_path / "one.array_record", [b"a", b"b"])
    result = tpufeed(
        "bench",
        "one.array_record",
        "--batches",
        "1",
        "--plot",
        read_only_dir / "bench.png",
        cwd=tmp_path,
    )
    one_line_error(
        result, f"--plot {read_only_dir / 'bench.png'} cannot be written: Read-only file system"
    )
    assert result.stdout == ""


# tpufeed inspect


def test_inspect_verify_names_a_corrupted_shard_and_exits_1(tmp_path):
    built(tmp_path, num_shards=3)
    result = tpufeed("inspect", "--verify", "ds", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "verify: 3 shards: size, crc32c and record count checked" in result.stdout
    shard = tmp_path / "ds" / "data-00001-of-00003.array_record"
    data = bytearray(shard.read_bytes())
    data[100] ^= 0xFF
    shard.write_bytes(bytes(data))
    result = tpufeed("inspect", "--verify", "ds", cwd=tmp_path)
    assert result.returncode == 1
    failed = [line for line in result.stdout.splitlines() if "FAILED" in line]
    assert len(failed) == 1 and f"FAILED {shard}: CRC32C is" in failed[0]
    assert "1 shard failed verification" in result.stderr and "Traceback" not in result.stderr


def test_inspect_verify_checks_record_counts(tmp_path):
    built(tmp_path, num_shards=2, n=10)
    path = tmp_path / "ds" / "manifest.json"
    manifest = json.loads(path.read_text())
    manifest["shards"][0]["num_records"] += 1  # the total still adds up
    manifest["shards"][1]["num_records"] -= 1
    path.write_text(json.dumps(manifest))
    result = tpufeed("inspect", "--verify", "ds", cwd=tmp_path)
    assert result.returncode == 1
    assert (
        "data-00000-of-00002.array_record: shard holds 5 records, the manifest says 6"
        in result.stdout
    )
    assert (
        "data-00001-of-00002.array_record: shard holds 5 records, the manifest says 4"
        in result.stdout
    )


def test_inspect_shows_scalar_values_and_words_verify_as_done(tmp_path):
    """Scalars (stored as 0-d arrays) and small arrays show their values, a large array its
    dtype and shape; "(--verify checks them)" only where --verify was not passed."""
    pytest.importorskip("apache_beam")
    from tpufeed.beam import BuildConfig, build

    (tmp_path / "t.py").write_text(
        "import numpy as np\n"
        "def arrays(r):\n"
        "    return {'label': np.int32(r['id']), 'ids': np.arange(3), 'big': np.zeros(40)}\n"
    )
    write_jsonl(tmp_path / "in.jsonl", 4)
    transform = f"{tmp_path / 't.py'}:arrays"
    build(BuildConfig((str(tmp_path / "in.jsonl"),), str(tmp_path / "ds"), transforms=(transform,)))
    plain = tpufeed("inspect", "ds", cwd=tmp_path).stdout.splitlines()
    assert plain[0].endswith("as the manifest lists them (--verify checks them)")
    assert {"  label: int32[] = 0", "  ids: int64[3] = [0, 1, 2]", "  big: float64[40]"} <= set(
        plain
    )
    checked = tpufeed("inspect", "--verify", "ds", cwd=tmp_path).stdout.splitlines()
    assert checked[0].endswith("as the manifest lists them")
    assert checked[-1].startswith("verify: 1 shard: size, crc32c and record count checked")


def test_inspect_describes_the_quickstart_folder_as_a_plain_folder_of_shards(tmp_path):
    pytest.importorskip("sklearn")
    from tpufeed.cli.quickstart import NUM_SHARDS, build

    build(tmp_path / "qs")
    result = tpufeed("inspect", "--verify", "qs", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert (
        f"qs: a plain folder of {NUM_SHARDS} ArrayRecord files with no manifest.json (not "
        "written by `tpufeed build`); open it with Dataset.from_array_record("
        "'qs/*.array_record')"
    ) in result.stdout
    assert "did not finish" not in result.stdout + result.stderr
    assert "image: uint8[8, 8]" in result.stdout
    assert f"verify: {NUM_SHARDS} files: every record read" in result.stdout


def test_inspect_of_a_folder_a_build_left_unfinished_says_so(tmp_path):
    os.makedirs(tmp_path / "ds" / ".tpufeed-tmp-0123456789ab")
    result = tpufeed("inspect", "ds", cwd=tmp_path)
    assert result.returncode == 2
    assert "a build into it did not finish" in result.stderr
    os.makedirs(tmp_path / "empty")
    result = tpufeed("inspect", "empty", cwd=tmp_path)
    assert result.returncode == 2 and "not a dataset" in result.stderr


def test_output_into_a_closed_pipe_ends_quietly(tmp_path):
    """`tpufeed inspect ... | head`: the reader goes away; no BrokenPipeError traceback."""
    from tpufeed.sources.array_record import write_array_records

    write_array_records(tmp_path / "one.array_record", [b"a", b"b"])
    read_end, write_end = os.pipe()
    os.close(read_end)  # closed before the command writes anything: every write fails
    try:
        result = subprocess.run(
            [*tpufeed_command(), "inspect", "one.array_record"],
            cwd=tmp_path,
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
        )
    finally:
        os.close(write_end)
    assert result.returncode == 141 and result.stderr == ""


def test_counts_of_one_are_singular(tmp_path):
    from tpufeed.sources.array_record import write_array_records

    write_array_records(tmp_path / "one.array_record", [b"a"])
    result = tpufeed("inspect", "one.array_record", cwd=tmp_path)
    assert result.returncode == 0
    assert result.stdout.startswith(
        "1 file, 1 record\n  one.array_record: 1 record\nrecord 0: 1 byte\n"
    )


@pytest.mark.parametrize("command", ["quickstart", "inspect", "bench", "build", "cache"])
def test_every_help_shows_the_defaults(command):
    from tpufeed.cli.program import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    result = tpufeed(command, "--help")
    assert result.returncode == 0
    text = " ".join(result.stdout.split())
    for action in sub.choices[command]._actions:
        default = action.default
        if not (
            default is None or default is False or default == [] or default == argparse.SUPPRESS
        ):
            assert f"(default: {default})" in text, (command, action.dest)
