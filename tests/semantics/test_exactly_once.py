"""DESIGN.md semantics 1, exactly once per epoch: for any host count, the hosts together deliver
every record once (before filter; drop_remainder drops only each host's last partial batch)."""

import pytest

import tpufeed
from tests.semantics.numbered import N, flat, make, records_of


@pytest.mark.parametrize("hosts", [1, 2, 3, 8])
@pytest.mark.parametrize("batch", [None, 1, 4, 5])
def test_every_record_once_per_epoch_across_hosts(hosts, batch):
    epochs = 2
    per_epoch = [[] for _ in range(epochs)]
    for host in range(hosts):
        it = make(hosts=hosts, host=host, batch=batch, epochs=epochs).iterator()
        for item in it:
            per_epoch[it.get_state()["epoch"]].extend(records_of(item))
    for delivered in per_epoch:
        assert sorted(delivered) == list(range(N))


@pytest.mark.parametrize("hosts", [1, 2, 3, 8])
def test_drop_remainder_drops_only_each_hosts_last_partial_batch(hosts):
    batch = 3
    total, dropped = [], 0
    for host in range(hosts):
        it = make(hosts=hosts, host=host, batch=batch, drop=True).iterator()
        items = list(it)
        assert all(len(records_of(b)) == batch for b in items)
        share = len(range(host, N, hosts))
        assert it.dropped_records == share % batch
        dropped += it.dropped_records
        total.extend(flat(items))
    assert len(total) == len(set(total)) == N - dropped


def test_batches_never_span_epochs():
    items = list(make(batch=10, epochs=2).iterator())
    assert [len(records_of(b)) for b in items] == [10, 10, 10, 7] * 2


def test_shuffle_changes_order_each_epoch_and_without_shuffle_order_is_stored():
    epochs = [flat(list(make(epochs=1).iterator()))]
    it = make(epochs=3).iterator()
    all_records = flat(list(it))
    assert all_records[:N] == epochs[0]
    assert all_records[:N] != all_records[N : 2 * N] != all_records[2 * N :]
    assert flat(make(seed=None).iterator()) == list(range(N))


def test_filter_counts_positions_not_elements():
    keep_even = lambda ds: ds.filter(lambda e: e["record"] % 2 == 0)  # noqa: E731
    out = []
    for host in range(3):
        out += flat(make(hosts=3, host=host, batch=4, extra=keep_even).iterator())
    assert sorted(out) == list(range(0, N, 2))


@pytest.mark.parametrize("hosts", [1, 2, 3, 8])
@pytest.mark.parametrize("seed", [None, 7])
@pytest.mark.parametrize(
    "where,cut", [("before", slice(5, 30)), ("after", slice(5, 30)), ("after", slice(1, None, 3))]
)
def test_a_sliced_epoch_is_delivered_once_across_hosts(hosts, seed, where, cut):
    """slice/take/skip cut each epoch before the hosts share it: together they deliver the
    records the slice keeps (of the records, or of each epoch's shuffled order), each once."""
    epochs = 2
    per_epoch = [[] for _ in range(epochs)]
    for host in range(hosts):
        ds = tpufeed.Dataset.from_sequence(list(range(N)))
        if where == "before":
            ds = ds.slice(cut)
        ds = ds if seed is None else ds.shuffle(seed)
        if where == "after":
            ds = ds.slice(cut)
        it = ds.shard(host, hosts).batch(4).repeat(epochs).iterator()
        for item in it:
            per_epoch[it.get_state()["epoch"]].extend(item.tolist())
    for epoch, delivered in enumerate(per_epoch):
        assert len(delivered) == len(set(delivered)) == len(range(N)[cut])
        if seed is None or where == "before":
            assert sorted(delivered) == list(range(N)[cut])
        else:  # places of this epoch's order
            order = list(tpufeed.Dataset.from_sequence(list(range(N))).shuffle(seed).repeat(2))
            assert sorted(delivered) == sorted(order[epoch * N : (epoch + 1) * N][cut])
