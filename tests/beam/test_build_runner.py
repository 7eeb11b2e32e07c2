"""Which runners a build accepts, and the check of the steps' counters against the manifest."""

from __future__ import annotations

import pytest

pytest.importorskip("apache_beam")

from apache_beam.options.pipeline_options import PipelineOptions

import tpufeed
from tpufeed import cli
from tpufeed.beam.build_runner import check_counts, runner_for, worker_args
from tpufeed.errors import InvalidArgumentError


def _cli(tmp_path, capsys, *args: str) -> tuple[int, str]:
    (tmp_path / "in.jsonl").write_text('{"a": 1}\n{"a": 2}\n')
    code = cli.main(
        [
            "build",
            "-q",
            "--input",
            str(tmp_path / "in.jsonl"),
            "--output",
            str(tmp_path / "out"),
            *args,
        ]
    )
    return code, capsys.readouterr().err


@pytest.mark.parametrize(
    "runner", ["DaskRunner", "apache_beam.runners.dask.dask_runner.DaskRunner"]
)
def test_dask_runner_is_refused_in_one_line_with_the_reason(tmp_path, capsys, runner):
    code, err = _cli(tmp_path, capsys, "--runner", runner)
    assert code == 2 and err.count("\n") == 1
    assert f"--runner {runner}" in err and "tagged outputs" in err and "last branch" in err
    assert not (tmp_path / "out").exists()


def test_bundle_based_direct_runner_is_refused_with_the_reason(tmp_path, capsys):
    code, err = _cli(tmp_path, capsys, "--runner", "BundleBasedDirectRunner")
    assert code == 2 and err.count("\n") == 1
    assert "--runner BundleBasedDirectRunner" in err and "side input" in err
    assert "FnApiRunner" in err and not (tmp_path / "out").exists()


def test_summaries_that_miss_records_fail_before_the_manifest(tmp_path):
    """A runner that drops a step's tagged outputs leaves summaries short of the shards."""
    from tpufeed.beam.write.manifest_writer import WriteManifest

    shards = [
        {
            "index": 0,
            "path": "data-00000-of-00001.array_record",
            "num_records": 5,
            "num_bytes": 10,
            "crc32c": 0,
            "kinds": [0],
            "summary": {},
        }
    ]
    finalize = WriteManifest(str(tmp_path / "ds"), "b1", 1, {"format": "array_record"}, True)
    with pytest.raises(tpufeed.TpufeedError, match="summaries cover 0 records, the shards hold 5"):
        list(finalize.process(None, shards, [], [], [], []))
    with pytest.raises(tpufeed.TpufeedError, match="does not keep a step's tagged outputs apart"):
        list(finalize.process(None, shards, [], [], ["a chunk, not a summary"], []))
    assert not (tmp_path / "ds" / "manifest.json").exists()


@pytest.mark.parametrize(
    "args, match",
    [
        (["--direct_running_mode=multi_threading"], "multi_threading mode loses records"),
        (["--direct_num_workers=2", "--direct_running_mode=multi_threading"], "loses records"),
        (["--direct_num_workers=2"], "without --direct_running_mode=multi_processing"),
        (["--direct_num_workers=2", "--direct_running_mode=in_memory"], "on threads"),
    ],
)
def test_modes_that_lose_records_are_refused_with_the_reason(tmp_path, capsys, args, match):
    code, err = _cli(tmp_path, capsys, *args)
    assert code == 2 and match in err and "--workers N" in err


def test_workers_with_another_runner_or_direct_options_is_refused():
    with pytest.raises(InvalidArgumentError, match="--workers 2 is for the local runner"):
        worker_args(2, ("--runner", "DataflowRunner"))
    with pytest.raises(InvalidArgumentError, match="not both"):
        worker_args(2, ("--direct_num_workers=3",))
    with pytest.raises(InvalidArgumentError, match="--workers must be a positive int"):
        worker_args(0, ())
    assert worker_args(1, ("--x",)) == ("--x",)
    assert worker_args(3, ()) == ("--direct_num_workers=3",)


def test_multi_processing_and_worker_processes_are_accepted():
    from apache_beam.runners.portability.fn_api_runner import FnApiRunner

    options = PipelineOptions(["--direct_num_workers=2", "--direct_running_mode=multi_processing"])
    assert isinstance(runner_for(options), FnApiRunner)
    runner = runner_for(PipelineOptions(["--direct_num_workers=2"]), workers=2)
    assert "tpufeed.beam.workers.worker_process" in runner._default_environment.command_string
    assert runner_for(PipelineOptions(["--runner", "DataflowRunner"])) is None  # Beam makes it


class _Counter:
    def __init__(self, name, value):
        self.key = type("Key", (), {"metric": type("Name", (), {"name": name})})()
        self.committed, self.attempted = value, value


class _Result:
    """A runner result as Beam's `PipelineResult.metrics()` gives it (or fails to)."""

    def __init__(self, counters=None, error=None):
        self._counters, self._error = counters, error

    def metrics(self):
        if self._error is not None:
            raise self._error
        counters = self._counters

        class Query:
            def query(self, _):
                return {"counters": counters}

        return Query()


_MANIFEST = {"num_records": 8, "build": {"records_in": 10}}


def test_counts_that_disagree_with_the_steps_fail_and_touch_nothing(tmp_path):
    """The build checks the counts before its dataset is switched in: the output's own
    manifest (here a stand-in) stays."""
    (tmp_path / "manifest.json").write_text("{}")
    counters = [
        _Counter("records_in", 10),
        _Counter("records_out", 9),
        _Counter("records_written", 8),
    ]
    with pytest.raises(
        tpufeed.TpufeedError, match="records_out: steps counted 9, the manifest has 8"
    ):
        check_counts(_Result(counters), _MANIFEST, str(tmp_path), "FnApiRunner")
    assert (tmp_path / "manifest.json").read_text() == "{}"
    counters[1] = _Counter("records_out", 8)
    check_counts(_Result(counters), _MANIFEST, str(tmp_path), "FnApiRunner")


@pytest.mark.parametrize(
    "result",
    [
        _Result(error=NotImplementedError("no metrics")),
        _Result([]),
        _Result([_Counter("records_in", 10), _Counter("records_out", 8)]),
    ],
)
def test_a_runner_without_metrics_fails_the_build(tmp_path, result):
    (tmp_path / "manifest.json").write_text("{}")
    with pytest.raises(
        tpufeed.TpufeedError,
        match="the runner SomeRunner reported no .*counter, so tpufeed cannot check",
    ):
        check_counts(result, _MANIFEST, str(tmp_path), "SomeRunner")
    assert (tmp_path / "manifest.json").read_text() == "{}"
