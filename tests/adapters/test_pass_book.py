"""The pass book (`tpufeed.adapters._pass_book`): where `to_torch()`'s passes are numbered for
every process. Members of one pass agree on its number; a member that comes back under the
same key begins the next; `set_epoch` and a pending state go to the next pass begun anywhere;
forked processes share the book, a copy keeps its own."""

from __future__ import annotations

import copy
import multiprocessing
import os
import pickle

import pytest

import tpufeed
from tpufeed.adapters._pass_book import PassBook, book_of


def by_epoch(state):
    return state["epoch"]


def test_the_loops_process_begins_a_pass_at_each_claim():
    book = PassBook()
    assert [book.claim(None, None, by_epoch) for _ in range(3)] == [(0, None), (1, None), (2, None)]
    assert book.upcoming() == (3, None)


def test_workers_of_one_pass_agree_and_a_returning_worker_begins_the_next():
    book = PassBook()
    seed = 1234
    assert book.claim((seed, 2, 0, 0), None, by_epoch) == (0, None)
    assert book.claim((seed, 2, 0, 1), None, by_epoch) == (0, None)  # joins worker 0's pass
    # persistent workers: the same seed, one pass more begun in each process
    assert book.claim((seed, 2, 1, 1), None, by_epoch) == (1, None)  # worker 1 first, now
    assert book.claim((seed, 2, 1, 0), None, by_epoch) == (1, None)
    # a loader made anew with the same seeded generator: the same key as pass 0's
    assert book.claim((seed, 2, 0, 0), None, by_epoch) == (2, None)
    assert book.claim((seed, 2, 0, 1), None, by_epoch) == (2, None)
    # another loader's workers (another base seed) begin their own pass
    assert book.claim((99, 2, 0, 1), None, by_epoch) == (3, None)


def test_set_epoch_and_a_pending_state_go_to_the_next_pass_begun():
    book = PassBook()
    book.select(7)
    assert book.claim(None, None, by_epoch) == (7, None)
    state = {"epoch": 4}
    book.set_pending(state)
    assert book.upcoming() == (8, state)
    assert book.claim((5, 2, 0, 1), None, by_epoch) == (4, state)  # taken by a worker's pass
    assert book.claim((5, 2, 0, 0), None, by_epoch) == (4, state)  # and its other worker
    assert book.upcoming() == (5, None)  # the passes after it go on from there
    own = {"epoch": 9}  # a worker's own state (StatefulDataLoader) comes before everything
    assert book.claim((6, 1, 0, 0), own, by_epoch) == (9, own)
    assert book.upcoming() == (10, None)


def _claim_in_child(book, out):
    out.put(book.claim((1, 2, 0, os.getpid() % 2), None, by_epoch))


@pytest.mark.multiprocess
def test_forked_processes_share_the_book_and_a_copy_keeps_its_own():
    book = PassBook()
    book.claim(None, None, by_epoch)
    context = multiprocessing.get_context("fork")
    out = context.Queue()
    child = context.Process(target=_claim_in_child, args=(book, out))
    child.start()
    assert out.get(timeout=30) == (1, None)
    child.join(timeout=30)
    assert child.exitcode == 0
    assert book.upcoming() == (2, None)  # the child's pass counted here
    for copied in (copy.deepcopy(book), pickle.loads(pickle.dumps(book))):
        assert copied.claim(None, None, by_epoch) == (2, None)
    assert book.upcoming() == (2, None)  # copies count apart


def test_every_to_torch_of_one_dataset_counts_in_one_book():
    ds = tpufeed.Dataset.from_sequence(list(range(4)))
    assert book_of(ds) is book_of(ds)
    assert book_of(ds) is not book_of(ds.batch(2))  # another Dataset object


def test_a_writer_killed_before_its_truncate_leaves_a_readable_book():
    """A table is written whole, then the old tail cut off: killed in between, the file holds
    the new table and the end of a longer old one. Bytes that are no table are named."""
    book = PassBook()
    book.set_pending({"epoch": 3, "a long state": "x" * 200})
    os.pwrite(book._fd, b'{"next": 5, "pending": null, "passes": []}', 0)  # no truncate
    assert book.upcoming() == (5, None)
    os.pwrite(book._fd, b"\xff\x00garbage", 0)
    with pytest.raises(tpufeed.StateError, match="pass book is unreadable"):
        book.upcoming()
