"""Hosts end together (DESIGN semantics 8): hosts that make different numbers of batches still
end every epoch at the same step. The hosts here are threads of this process agreeing through
`ThreadAgreement`; tests/semantics/test_multihost.py runs the same with real JAX processes."""

import threading

import numpy as np
import pytest

import tpufeed
from tpufeed.errors import InvalidArgumentError
from tpufeed.run.hosts.agreement import ThreadAgreement
from tpufeed.run.hosts.uneven import EvenHosts, counts_are_even

PIPELINES = {
    "filter": lambda ds: ds.filter(lambda e: e["id"] % 3 != 0),
    "flat_map": lambda ds: ds.flat_map(lambda e: [e] * int(e["id"] % 3)),
    "ignore_errors": lambda ds: ds.map(lambda e: e if e["id"] % 5 else 1 / 0).ignore_errors(100),
    "uneven shard": lambda ds: ds,
}


def make(kind, hosts, host, n=53, batch=4, drop=False, epochs=1, workers=0):
    ds = (
        tpufeed.Dataset.from_sequence(list(range(n)))
        .shuffle(7)
        .shard(host, hosts)
        .map(lambda i: {"id": np.int64(i)})
    )
    return PIPELINES[kind](ds).batch(batch, drop_remainder=drop).repeat(epochs).workers(workers)


def run_hosts(kind, hosts, uneven, **kwargs):
    """Each host (a thread) iterates to the end: its batches, epochs and statistics."""
    agreements = ThreadAgreement.group(hosts)
    results: list = [None] * hosts
    errors: list = []

    def host(h):
        try:
            it = make(kind, hosts, h, **kwargs).iterator(uneven=uneven, agreement=agreements[h])
            batches, epochs = [], []
            for batch in it:
                batches.append(batch)
                epochs.append(it.get_state()["epoch"])
            results[h] = (batches, epochs, it.stats())
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=host, args=(h,)) for h in range(hosts)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads), "a host hung"
    if errors:
        raise errors[0]
    return results


def alone(kind, hosts, host, **kwargs):
    """What the host makes on its own, without agreeing: (ids, epoch) of each batch."""
    it = make(kind, hosts, host, **kwargs).iterator()
    return [(b["id"].tolist(), it.get_state()["epoch"]) for b in it]


@pytest.mark.parametrize("kind", sorted(PIPELINES))
@pytest.mark.parametrize("hosts", [2, 3])
def test_shortest_ends_every_epoch_at_the_first_host_to_run_out(kind, hosts):
    results = run_hosts(kind, hosts, "shortest", epochs=2)
    steps = [len(batches) for batches, _, _ in results]
    assert len(set(steps)) == 1
    assert len({tuple(epochs) for _, epochs, _ in results}) == 1  # epochs change at one step
    for h, (batches, epochs, stats) in enumerate(results):
        assert all(len(b["id"]) == 4 for b in batches)  # no short batch in a multi-host step
        own = alone(kind, hosts, h, epochs=2)
        for epoch in (0, 1):  # each epoch handed out is a prefix of what the host makes alone
            got = [b["id"].tolist() for b, e in zip(batches, epochs) if e == epoch]
            mine = [ids for ids, e in own if e == epoch]
            assert got == mine[: len(got)]
        cut = sum(len(ids) for ids, _ in own) - sum(len(b["id"]) for b in batches)
        assert stats.dropped_records == cut and stats.cut_batches >= (1 if cut else 0)


@pytest.mark.parametrize("kind", sorted(PIPELINES))
@pytest.mark.parametrize("hosts", [2, 3])
def test_pad_delivers_every_record_once_in_steps_of_one_shape(kind, hosts):
    results = run_hosts(kind, hosts, "pad", epochs=2)
    steps = {len(batches) for batches, _, _ in results}
    assert len(steps) == 1
    for epoch in (0, 1):
        real = []
        for batches, epochs, _stats in results:
            for b, e in zip(batches, epochs):
                assert b["id"].shape == (4,) and b["mask"].dtype == bool
                if e == epoch:
                    real += b["id"][b["mask"]].tolist()
        everything = [
            i
            for h in range(hosts)
            for ids, e in alone(kind, hosts, h, epochs=2)
            if e == epoch
            for i in ids
        ]
        assert sorted(real) == sorted(everything)
    padded = sum(r[2].padded_rows for r in results)
    real_rows = sum(int(b["mask"].sum()) for r in results for b in r[0])
    assert padded + real_rows == hosts * 4 * len(results[0][0])


def test_pad_fills_a_host_that_has_nothing_at_all():
    results = run_hosts("uneven shard", 4, "pad", n=3, batch=2)
    assert [len(b) for b, _, _ in results] == [1, 1, 1, 1]
    empty = results[3][0][0]
    assert not empty["mask"].any() and empty["id"].shape == (2,)
    assert results[3][2].padded_batches == 1


def test_with_workers_the_hosts_still_end_together():
    results = run_hosts("filter", 2, "pad", epochs=2, workers=2)
    assert len({len(b) for b, _, _ in results}) == 1


def test_states_taken_at_one_step_of_a_padded_run_resume_exactly():
    hosts = 3
    agreements = ThreadAgreement.group(hosts)
    states, before = [None] * hosts, [[] for _ in range(hosts)]
    barrier = threading.Barrier(hosts)

    def host(h):
        it = make("flat_map", hosts, h).iterator(uneven="pad", agreement=agreements[h])
        for _ in range(3):
            b = next(it)
            before[h] += b["id"][b["mask"]].tolist()
        states[h] = it.get_state()
        barrier.wait()
        it.close()

    threads = [threading.Thread(target=host, args=(h,)) for h in range(hosts)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    after = []
    for h in range(2):  # two hosts continue: plain iterators suffice to check exactness
        after += [i for b in make("flat_map", 2, h).iterator(states) for i in b["id"].tolist()]
    expected = [i for i in range(53) for _ in range(i % 3)]
    assert sorted(sum(before, []) + after) == expected


def test_counts_are_even_is_decided_from_the_record_count():
    plan = lambda ds: ds._plan()  # noqa: E731
    start = lambda p: tpufeed.order.cursor.epoch_start(0, p.hosts, p.host)  # noqa: E731
    even = make("uneven shard", 2, 0, n=48, batch=4, epochs=2)
    assert counts_are_even(plan(even), start(plan(even)))
    odd = make("uneven shard", 2, 0, n=45, batch=4, drop=False)  # 23 and 22: last batch 3 or 2
    assert not counts_are_even(plan(odd), start(plan(odd)))
    dropped = make("uneven shard", 2, 0, n=45, batch=4, drop=True)  # 5 whole batches each
    assert counts_are_even(plan(dropped), start(plan(dropped)))
    filtered = make("filter", 2, 0, n=48)
    assert not counts_are_even(plan(filtered), start(plan(filtered)))


def test_even_counts_need_no_agreement_and_shortest_changes_nothing():
    ds = make("uneven shard", 2, 0, n=48, epochs=2)
    it = ds.iterator(uneven="shortest")
    assert not isinstance(it._run, EvenHosts)  # nothing wraps the run
    assert [b["id"].tolist() for b in it] == [b["id"].tolist() for b in ds]
    padded = ds.iterator(uneven="pad")  # no other host is asked: the counts are even
    assert all(b["mask"].all() for b in padded) and padded.stats().agreements == 0


def test_uneven_hosts_without_a_way_to_agree_are_told_how():
    with pytest.raises(InvalidArgumentError, match="jax.distributed.initialize.*agreement="):
        make("filter", 2, 0).iterator(uneven="shortest")
    with pytest.raises(InvalidArgumentError, match="'shortest' or 'pad'"):
        make("filter", 1, 0).iterator(uneven="longest")


def test_pad_needs_batches_of_dicts():
    with pytest.raises(InvalidArgumentError, match="needs a pipeline with batch"):
        tpufeed.Dataset.from_sequence([1, 2]).iterator(uneven="pad")
    with pytest.raises(InvalidArgumentError, match="must be dicts"):
        next(tpufeed.Dataset.from_sequence([1, 2]).batch(2).iterator(uneven="pad"))
    with pytest.raises(InvalidArgumentError, match="already has one"):
        next(tpufeed.Dataset.from_sequence([{"mask": 1}]).batch(1).iterator(uneven="pad"))


def test_a_host_that_stops_agreeing_fails_the_others_instead_of_hanging():
    agreements = ThreadAgreement.group(2, timeout_s=2)
    it = make("filter", 2, 0).iterator(uneven="shortest", agreement=agreements[0])
    with pytest.raises(tpufeed.TpufeedError, match="another host stopped iterating"):
        next(it)


def test_each_host_counts_its_own_agreements():
    results = run_hosts("filter", 2, "shortest")
    for _, _, stats in results:
        assert stats.agreements > 0
        assert stats.counts["agreements"] == stats.agreements  # not the process's, two hosts'
