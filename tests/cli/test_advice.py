"""`tpufeed.cli.advice`: bench advises only what can help, judged from what the run measured.

The measurements are written out here (stage times, waits, cores' use), so each rule is
checked exactly; tests/cli/test_bench.py runs the real command.
"""

import math

import pytest

from tpufeed.cli.advice import CoreClock, CoreUse, Measurement, capacity, change_label, verdict
from tpufeed.run.autotune import MAX_PREFETCH
from tpufeed.run.stats import PipelineStats, StageStats

STEP = 0.05  # 256 records a step: training takes 5,120 records/s
REMOTE = {"cache_hits": 3, "cache_misses": 1}  # shards read through the shard cache


def measured(
    workers=0,
    prefetch=0,
    stages=None,
    busy=0.5,
    consumer=0.2,
    cores=2,
    steady_wait=0.12,
    wait_fraction=None,
    wall=4.0,
    records=256 * 72,
    counts=None,
):
    """A bench run of `records` in batches of 256 over `wall` seconds (`counts`: storage's,
    such as the shard cache's hits and misses of remote files)."""
    stats = PipelineStats(
        wall_seconds=wall,
        wait_seconds=wall * (steady_wait if wait_fraction is None else wait_fraction),
        batches=records // 256,
        records=records,
        workers=workers,
        prefetch=prefetch,
        queue_depth=0,
        memory_bytes=0,
        dropped_records=0,
        errors=0,
        stages=stages if stages is not None else {"read": StageStats(0.2, records, 1)},
        counts=counts or {},
    )
    use = CoreUse(cores, busy, consumer)
    return Measurement(stats, [], 0.05, steady_wait, records / wall, use)


def fast(procs=1, records=256 * 72):
    """Stages that could give about 90,000 records/s with `procs` processes."""
    return {
        "read": StageStats(0.1 / procs * procs, records, procs),
        "map(decode)": StageStats(0.05, records, procs),
        "batch": StageStats(0.05, records, procs),
    }


def test_two_workers_on_two_busy_cores_are_not_told_to_prefetch_more():
    """The case found on 2 cores: workers(2) was slower than none, wait 12%, and bench said
    "they take turns: overlap them with .prefetch(4) (now 2)"."""
    m = measured(workers=2, prefetch=2, stages=fast(2), busy=1.98, consumer=0.1)
    v = verdict(m, STEP)
    assert v["input_bound"] is True
    assert ".prefetch(" not in v["suggestion"] and v["change"] is None
    assert "no core was idle (2.0 of 2 cores busy" in v["suggestion"]
    assert "cannot help" in v["suggestion"]


def test_prefetch_at_its_most_is_not_doubled():
    """With auto settings bench said ".prefetch(32) (now 16)"; 16 is what auto goes to."""
    m = measured(workers=1, prefetch=MAX_PREFETCH, stages=fast(1), busy=1.2)
    v = verdict(m, STEP)
    assert f"prefetch is {MAX_PREFETCH} already" in v["suggestion"]
    assert "--trace" in v["suggestion"] and v["change"] is None


def test_uneven_batches_with_a_free_core_get_a_deeper_prefetch():
    v = verdict(measured(workers=1, prefetch=2, stages=fast(1), busy=1.1), STEP)
    assert v["change"] == {"prefetch": 4}
    assert ".prefetch(4) (now 2)" in v["suggestion"]


def test_one_thread_taking_turns_gets_a_prefetch_thread_whatever_the_cores():
    v = verdict(measured(stages=fast(1), busy=2.0, consumer=1.0), STEP)
    assert v["change"] == {"prefetch": 2} and "take turns in one thread" in v["suggestion"]


def test_workers_that_crowd_out_a_busy_consumer_are_told_to_leave_it_a_core():
    slow = {"map(f)": StageStats(8.0, 256 * 72, 2)}  # 4,608 records/s: short of 5,120
    v = verdict(measured(workers=2, prefetch=2, stages=slow, busy=2.0, consumer=0.8), STEP)
    assert v["change"] == {"workers": 1}
    assert ".workers(1) (now 2)" in v["suggestion"] and "compete for 2 cores" in v["suggestion"]


def test_more_workers_only_where_cores_were_idle():
    slow = {"map(f)": StageStats(8.0, 256 * 72, 1)}  # 2,304 records/s in one process
    idle = verdict(measured(stages=slow, busy=0.1, consumer=0.1), STEP)
    assert idle["change"] == {"workers": 2} and "cores were idle" in idle["suggestion"]
    # The consumer process does the work itself: a worker may take one core, it keeps the other.
    own = verdict(measured(stages=slow, busy=1.0, consumer=1.0), STEP)
    assert own["change"] == {"workers": 1}
    full = verdict(measured(stages=slow, busy=1.9, consumer=0.3), STEP)
    assert full["change"] is None and "no core is idle" in full["suggestion"]
    assert "tpufeed build --transform" in full["suggestion"]


def test_reading_on_busy_cores_is_not_told_to_use_more_workers():
    slow = {"read": StageStats(8.0, 256 * 72, 2)}
    v = verdict(measured(workers=2, stages=slow, busy=1.9, consumer=0.2, counts=REMOTE), STEP)
    assert "local SSD" in v["suggestion"] and ".workers(" not in v["suggestion"]
    idle = verdict(measured(workers=0, stages=slow, busy=0.2, consumer=0.1), STEP)
    assert ".workers(2) (now 0)" in idle["suggestion"] and idle["change"] == {"workers": 2}


def test_a_wait_that_was_only_the_start_up_is_not_input_bound():
    m = measured(workers=2, stages=fast(2), steady_wait=0.01, wait_fraction=0.3)
    v = verdict(m, STEP)
    assert v["input_bound"] is False and v["change"] is None
    assert v["suggestion"] == "the pipeline keeps up: nothing to change"
    assert v["wait_after_first_batch"] == 0.01 and v["slowdown"] == pytest.approx(1 / 0.99)


def test_capacity_adds_the_times_of_stages_that_run_one_after_another():
    """Three stages that each alone could give 3x the rate give 1x together."""
    records = 30_000
    stages = {n: StageStats(1.0, records, 1) for n in ("read", "map(f)", "batch")}
    stats = measured(stages=stages, records=records).stats
    assert capacity(stats) == pytest.approx(records / 3)
    # The consumer's transfer runs beside the workers: the slower side limits.
    with_transfer = {**stages, "transfer": StageStats(10.0, records, 1)}
    assert capacity(measured(stages=with_transfer).stats) == pytest.approx(records / 10)
    assert capacity(measured(stages={}).stats) == math.inf


def test_without_a_step_time_the_advice_is_for_a_shorter_step_and_still_gated():
    slow = {"map(f)": StageStats(8.0, 256 * 72, 2)}
    v = verdict(measured(workers=2, stages=slow, busy=2.0, consumer=0.1), 0.0)
    assert v["input_bound"] is None and "If your step is shorter:" in v["suggestion"]
    assert ".workers(" not in v["suggestion"] and v["measured"] is False


def test_unknown_core_use_counts_the_workers_as_busy():
    slow = {"map(f)": StageStats(8.0, 256 * 72, 1)}
    v = verdict(measured(workers=1, stages=slow, busy=None, consumer=0.1, cores=4), STEP)
    # 4 cores - 1 worker - 0.1 of the consumer: 2.9 idle, 3 more workers (3/4 of a core counts)
    assert v["change"] == {"workers": 4}
    assert "4 cores, use unknown" in v["suggestion"]


def test_change_labels_read_as_code():
    assert change_label({"workers": 1}) == ".workers(1)"
    assert change_label({"prefetch": 4}) == ".prefetch(4)"


def test_the_core_clock_measures_this_machine():
    use = CoreClock().stop()
    assert use.cores >= 1 and use.consumer >= 0
    if use.busy is not None:  # Linux: /proc/stat
        assert 0 <= use.busy <= use.cores


def test_a_run_too_short_to_judge_gets_no_advice():
    """Issue 47: two batches in 10 ms got advice anyway (and "cores busy unknown")."""
    for records, wall in [(256 * 2, 4.0), (256 * 72, 0.1)]:
        v = verdict(measured(stages=fast(1), records=records, wall=wall), STEP)
        assert v["too_short"] is True and v["change"] is None and v["input_bound"] is None
        assert v["suggestion"].startswith("the run was too short to judge (")
        assert "run longer, with --seconds" in v["suggestion"]
    assert verdict(measured(stages=fast(1)), STEP)["too_short"] is False


def test_reading_local_files_is_not_told_to_use_local_ssd():
    """Issue 47: "put the shards on local SSD" for files on local disk already."""
    slow_read = {"read": StageStats(8.0, 256 * 72, 1)}  # 2,304 records/s
    local = verdict(measured(stages=slow_read, busy=2.0, consumer=1.0), 0)
    assert (
        "local SSD" not in local["suggestion"]
        and "the files are local already" in local["suggestion"]
    )
    remote = verdict(measured(stages=slow_read, busy=2.0, consumer=1.0, counts=REMOTE), 0)
    assert "put the shards on local SSD" in remote["suggestion"]


@pytest.mark.parametrize(
    "stage, offline",
    [("map(decode)", True), ("filter(keep)", True), ("batch", False), ("random_map(aug)", False)],
)
def test_only_stages_a_build_can_do_are_told_to_move_offline(stage, offline):
    """Issue 47: "move batch offline" cannot apply: batch (and random_map's draws, new every
    epoch) are not what `tpufeed build --transform` does."""
    slow = {stage: StageStats(8.0, 256 * 72, 2)}
    v = verdict(measured(workers=2, prefetch=2, stages=slow, busy=2.0, consumer=0.1), STEP)
    assert ("tpufeed build --transform" in v["suggestion"]) is offline, v["suggestion"]
    if not offline:
        assert (
            f"a cheaper {stage}" in v["suggestion"]
            and "more processes cannot help" in v["suggestion"]
        )
    saturated = verdict(
        measured(workers=2, prefetch=2, stages={stage: StageStats(0.05, 256 * 72, 2)}, busy=1.98),
        STEP,
    )
    assert ("tpufeed build --transform" in saturated["suggestion"]) is offline
