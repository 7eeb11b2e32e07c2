"""`to_torch` (issue 5 item 2): tensors, resumable state, and no duplicates under DataLoader workers."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings

import numpy as np
import pytest

import tpufeed
from tpufeed.errors import StateError

torch = pytest.importorskip("torch")
from torch.utils.data import DataLoader  # noqa: E402

from tests.gcs_emulator import upload_shards  # noqa: E402

N = 45


def to_element(r):
    return {
        "id": np.int64(r),
        "x": np.full((3,), r, np.float32),
        "flag": r % 2 == 0,
        "name": f"r{r}",
    }


def make(n=N, batch=4, epochs=1, host=0, hosts=1):
    ds = tpufeed.Dataset.from_sequence(list(range(n))).shuffle(2).shard(host, hosts)
    return ds.map(to_element).batch(batch).repeat(epochs)


def ids(batches):
    return [i for b in batches for i in b["id"].tolist()]


def test_batches_are_tensors_with_the_pipelines_values():
    expected = list(make())
    got = list(make().to_torch())
    assert len(got) == len(expected)
    for a, b in zip(got, expected):
        assert a["id"].dtype == torch.int64 and a["x"].dtype == torch.float32
        assert a["flag"].dtype == torch.bool
        assert a["id"].tolist() == b["id"].tolist()
        assert torch.equal(a["x"], torch.from_numpy(b["x"]))
        assert a["name"] == b["name"].tolist()  # str leaves become lists, as in torch's collate


@pytest.mark.filterwarnings("ignore:This DataLoader will create")
@pytest.mark.parametrize("hosts", [1, 2])
@pytest.mark.parametrize("num_workers", [0, 1, 3])
def test_dataloader_workers_take_disjoint_shares(hosts, num_workers):
    epochs = 2
    delivered: list[int] = []
    for host in range(hosts):
        loader = DataLoader(
            make(epochs=epochs, host=host, hosts=hosts).to_torch(),
            batch_size=None,
            num_workers=num_workers,
        )
        delivered += ids(loader)
    assert sorted(delivered) == sorted(list(range(N)) * epochs)


@pytest.mark.filterwarnings("ignore:This DataLoader will create")
@pytest.mark.parametrize("num_workers", [2, 3])
def test_dataloader_workers_deliver_the_batches_of_num_workers_0_in_order(num_workers):
    """Batches cut from a fixed number of records: worker w makes batches w, w+W, ..."""
    expected = [b["id"].tolist() for b in DataLoader(make(epochs=2).to_torch(), batch_size=None)]
    got = [
        b["id"].tolist()
        for b in DataLoader(make(epochs=2).to_torch(), batch_size=None, num_workers=num_workers)
    ]
    assert got == expected == [b["id"].tolist() for b in make(epochs=2)]


@pytest.mark.filterwarnings("ignore:This DataLoader will create")
def test_dataloader_workers_batch_their_own_shares_where_a_filter_decides_the_counts():
    """README: after a filter each worker filters and batches every W-th record of the host's
    stream, so the same records come in other batches, with a short batch per worker."""
    ds = tpufeed.Dataset.from_sequence(list(range(10))).filter(lambda r: r != 5).batch(4)
    got = {
        w: [b.tolist() for b in DataLoader(ds.to_torch(), batch_size=None, num_workers=w)]
        for w in (0, 2)
    }
    assert got == {0: [[0, 1, 2, 3], [4, 6, 7, 8], [9]], 2: [[0, 2, 4, 6], [1, 3, 7, 9], [8]]}


@pytest.mark.filterwarnings("ignore:This DataLoader will create")
@pytest.mark.parametrize("num_workers", [0, 2])
def test_a_dataloader_that_batches_the_batches_again_is_refused_naming_batch_size_none(
    num_workers,
):
    from tpufeed.adapters.torch import BATCHED_TWICE
    from tpufeed.errors import InvalidArgumentError

    for batched in (make(), make().map(lambda b: b)):
        with pytest.raises(InvalidArgumentError, match=r"batch_size=None") as refused:
            next(iter(DataLoader(batched.to_torch(), num_workers=num_workers)))
        assert BATCHED_TWICE.split(":")[0] in str(refused.value)
        del refused  # its traceback holds the loader's workers
    unbatched = tpufeed.Dataset.from_sequence(list(range(8))).map(to_element)
    loader = DataLoader(unbatched.to_torch(), batch_size=4, num_workers=num_workers)
    assert sorted(ids(loader)) == list(range(8))  # the DataLoader may batch elements
    rows = tpufeed.Dataset.from_sequence([{"t": np.arange(3)}] * 4).pack({"t": 4})
    loader = DataLoader(rows.to_torch(), batch_size=2, num_workers=num_workers)
    assert [b["t"].shape for b in loader] == [(2, 4), (2, 4)]  # and packed rows


@pytest.mark.filterwarnings("ignore:This DataLoader will create")
@pytest.mark.parametrize("num_workers", [0, 2])
@pytest.mark.parametrize("pin_memory", [False, True])
def test_tuples_arrive_as_tuples_through_the_dataloaders_collation(num_workers, pin_memory):
    pair = lambda r: (np.full(3, r, np.float32), {"id": np.int64(r), "both": (np.int64(r), 1.5)})  # noqa: E731
    batched = tpufeed.Dataset.from_sequence(list(range(8))).map(pair)
    direct = next(iter(batched.batch(4).to_torch()))
    loader = DataLoader(
        batched.batch(4).to_torch(), batch_size=None, num_workers=num_workers, pin_memory=pin_memory
    )
    through = next(iter(loader))
    for batch in (direct, through):
        assert type(batch) is tuple and type(batch[1]["both"]) is tuple
        assert batch[0].shape == (4, 3) and batch[1]["both"][0].tolist() == [0, 1, 2, 3]
    collated = next(iter(DataLoader(batched.to_torch(), batch_size=4, num_workers=num_workers)))
    assert type(collated) is tuple and type(collated[1]["both"]) is tuple  # elements collated
    assert collated[0].shape == (4, 3) and collated[1]["id"].shape == (4,)


@pytest.mark.parametrize("stop", [0, 1, 5, 12, 17])  # 12 batches an epoch
def test_state_dict_resumes_exactly_across_epochs(stop):
    ds = make(epochs=2)
    expected = ids(ds)
    torch_ds = ds.to_torch()
    it = iter(DataLoader(torch_ds, batch_size=None))
    head = ids(next(it) for _ in range(stop))
    state = json.loads(json.dumps(torch_ds.state_dict()))
    resumed = ds.to_torch()
    resumed.load_state_dict(state)
    assert head + ids(DataLoader(resumed, batch_size=None)) == expected
    assert ids(resumed) == ids(make(epochs=4))[len(expected) :]  # a later pass: the next epochs


def test_load_state_dict_rejects_a_foreign_state():
    state = make(n=10).to_torch().state_dict()
    with pytest.raises(StateError):
        make().to_torch().load_state_dict(state)
    with pytest.raises(StateError):
        make().to_torch().load_state_dict("not a dict")


def test_pin_memory_without_an_accelerator_warns_and_still_yields():
    if torch.accelerator.is_available():
        batch = next(iter(make().to_torch(pin_memory=True)))
        assert batch["x"].is_pinned()
        return
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        batch = next(iter(make().to_torch(pin_memory=True)))
    assert any("no accelerator" in str(w.message) for w in caught)
    assert batch["x"].tolist() == next(iter(make()))["x"].tolist()


def test_wait_fraction_of_the_pass():
    torch_ds = make().to_torch()
    assert torch_ds.wait_fraction == 0.0
    for _ in torch_ds:
        pass
    assert 0.0 < torch_ds.wait_fraction <= 1.0


# Runs in a fresh interpreter: the riegeli state that broke forked workers is per process, and a
# worker killed by a signal must fail this test, not the test process. The parent reads first
# (a batch, and its prefetch thread keeps reading) so the workers are forked from a process that
# has used every reader.
_FORKED_WORKERS = r"""
import json, sys
import numpy as np
import tpufeed
from torch.utils.data import DataLoader

def delivered(kind, arg):
    if kind == "array_record":
        ds = tpufeed.Dataset.from_array_record(arg)
    elif kind == "tfrecord":
        ds = tpufeed.Dataset.from_tfrecord(arg)
    elif kind == "dataset":
        ds = tpufeed.Dataset.open(arg)
    else:
        ds = tpufeed.Dataset.from_sequence([b"%d" % i for i in range(arg)])
    # Each record as text: a decoded record's "id", a raw record's bytes in hex.
    ds = ds.shuffle(seed=0).map(
        lambda r: {"key": str(r["id"]) if isinstance(r, dict) else r.hex()}).batch(8)
    peek = iter(ds.prefetch(2))
    next(peek)
    loader = DataLoader(ds.to_torch(), batch_size=None, num_workers=2,
                        multiprocessing_context="fork", timeout=60)
    got = [key for batch in loader for key in batch["key"]]
    peek.close()
    return got

print(json.dumps({name: delivered(kind, arg) for name, kind, arg in json.loads(sys.argv[1])}))
"""
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run_forked_workers(cases: list[tuple[str, str, object]]) -> dict[str, list[str]]:
    """{case name: the records a DataLoader with 2 forked workers delivered, as text}."""
    proc = subprocess.run(
        [sys.executable, "-c", _FORKED_WORKERS, json.dumps(cases)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.slow
@pytest.mark.multiprocess
def test_dataloader_workers_forked_after_the_parent_read_deliver_every_source_exactly(tmp_path):
    from array_record.python.array_record_module import ArrayRecordWriter

    from tests.dataset_folder import make_dataset
    from tpufeed.sources.array_record import write_array_records
    from tpufeed.sources.tfrecord import write_tfrecords

    n = 120
    records = [b"%d" % i for i in range(n)]
    parts = [records[i::3] for i in range(3)]
    for s, part in enumerate(parts):
        write_array_records(tmp_path / f"ours-{s}.array_record", part)
        writer = ArrayRecordWriter(str(tmp_path / f"theirs-{s}.array_record"), "")  # big chunks
        for r in part:
            writer.write(r)
        writer.close()
        write_tfrecords(tmp_path / f"ours-{s}.tfrecord", part)
    cases = [
        ("array_record (ours)", "array_record", str(tmp_path / "ours-*.array_record")),
        (
            "array_record (array_record's writer)",
            "array_record",
            str(tmp_path / "theirs-*.array_record"),
        ),
        ("tfrecord (ours)", "tfrecord", str(tmp_path / "ours-*.tfrecord")),
        ("sequence", "sequence", n),
    ]
    tf = pytest.importorskip("tensorflow")
    for s, part in enumerate(parts):
        with tf.io.TFRecordWriter(str(tmp_path / f"tf-{s}.tfrecord")) as writer:
            for r in part:
                writer.write(r)
    cases.append(("tfrecord (tf.io.TFRecordWriter)", "tfrecord", str(tmp_path / "tf-*.tfrecord")))
    for file_format in ("array_record", "tfrecord"):
        folder = tmp_path / f"dataset-{file_format}"
        make_dataset(folder, [[{"id": i} for i in range(s, n, 3)] for s in range(3)], file_format)
        cases.append((f"dataset folder ({file_format})", "dataset", str(folder)))
    got = run_forked_workers(cases)
    expected = {
        name: sorted(str(i) if kind == "dataset" else records[i].hex() for i in range(n))
        for name, kind, _ in cases
    }
    assert {name: sorted(keys) for name, keys in got.items()} == expected


@pytest.mark.slow
@pytest.mark.multiprocess
@pytest.mark.emulator
@pytest.mark.parametrize("file_format", ["array_record", "tfrecord"])
def test_dataloader_workers_forked_after_the_parent_read_deliver_gcs_shards_exactly(
    gcs, bucket, upload, file_format
):
    url, records = upload_shards(upload, bucket, "ds", 3, 40, file_format)
    got = run_forked_workers([("gs", file_format, url)])["gs"]
    assert sorted(got) == sorted(r.hex() for r in records)


@pytest.mark.multiprocess
@pytest.mark.timeout(120)
def test_tpufeed_workers_under_a_dataloader_are_watched():
    """Decided (docs/faults.md): DataLoader worker processes are torch's, and so are its waits
    on them; a stopped one can hang it even with `timeout=`. tpufeed's own workers under
    `num_workers=0` keep tpufeed's bound on a stopped worker."""
    import signal
    import time

    from tests.processes import wait_for_workers
    from tpufeed.errors import WorkerError

    ds = tpufeed.Dataset.from_sequence(list(range(100_000))).map(
        lambda i: (time.sleep(0.001), i)[1]
    )
    ds = ds.batch(8).options(stopped_s=1).workers(2, isolate=True)
    it = iter(DataLoader(ds.to_torch(), batch_size=None, num_workers=0))
    next(it)
    workers = wait_for_workers(2)
    for worker in workers:
        worker.send_signal(signal.SIGSTOP)
    with pytest.raises(WorkerError, match="has been stopped"):
        for _ in it:
            pass
    del it


@pytest.mark.parametrize("uneven", ["shortest", "pad"])
def test_to_torch_ends_the_epochs_of_uneven_hosts_together(uneven):
    """Two hosts (threads agreeing through ThreadAgreement) whose filters keep different counts:
    through DataLoader(to_torch(uneven=...)) both run the same steps; "pad" masks its padding;
    the pass's stats count what was cut or padded."""
    import threading

    from tpufeed.run.hosts.agreement import ThreadAgreement

    agreements = ThreadAgreement.group(2, timeout_s=60)
    steps, masked, stats = [0, 0], [0, 0], [None, None]

    def host(h):
        ds = tpufeed.Dataset.from_sequence(list(range(40))).shard(h, 2).map(to_element)
        ds = ds.filter(lambda e: e["id"] % (3 + h) != 0).batch(4)
        data = ds.to_torch(uneven=uneven, agreement=agreements[h])
        loader = iter(DataLoader(data, batch_size=None))
        for batch in loader:
            steps[h] += 1
            masked[h] += int(batch["mask"].sum()) if uneven == "pad" else len(batch["id"])
        stats[h] = data.stats()

    threads = [threading.Thread(target=host, args=(h,)) for h in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert steps[0] == steps[1] > 0
    if uneven == "pad":  # every kept record once
        assert masked == [sum(1 for i in range(h, 40, 2) if i % (3 + h)) for h in range(2)]
        assert stats[0].padded_batches + stats[1].padded_batches > 0
    else:
        assert stats[0].cut_batches + stats[1].cut_batches > 0


def test_to_torch_uneven_in_dataloader_workers_is_refused_naming_num_workers_0():
    from tpufeed.errors import InvalidArgumentError

    data = make().to_torch(uneven="pad")
    with pytest.raises(InvalidArgumentError, match="num_workers=0"):
        next(iter(DataLoader(data, batch_size=None, num_workers=1)))
