"""The messages between the parent and its workers: answers in shared memory go as packed
fields, and what the parent reads back is the answer the worker made."""

import os
import pickle
import threading
from multiprocessing.connection import Connection

import numpy as np
import pytest

from tpufeed.run.workers.inbox import Inbox
from tpufeed.run.workers.messages import (
    Answer,
    AnswerMemo,
    Cramped,
    Dropped,
    Failure,
    Ready,
    Released,
    Spill,
    decode,
    decode_result,
    encode_answer,
    encode_free,
    encode_released,
    encode_spill,
    encode_task,
)

LAYOUT = (
    ("dict", ("x", "y"), (("leaf",), ("leaf",))),
    [("<f4", (256, 8), 0), ("<i8", (256,), 8192)],
)


def slot_answer(task_id, layout=LAYOUT, **changes):
    fields = dict(
        task_id=task_id,
        payload=layout,
        size=256,
        units=None,
        outs=None,
        last=None,
        final=True,
        slot=3,
        new_segment=None,
        times={"read": (0.25, 256), "map": (1.5, 256)},
    )
    fields.update(changes)
    return Answer(**fields)


def round_trip(answers):
    sent, received = AnswerMemo(), AnswerMemo()
    encoded = [encode_answer(a, sent) for a in answers]
    return encoded, [decode_result(e, received) for e in encoded]


def test_slot_answers_come_back_equal_and_repeat_nothing_unchanged():
    answers = [
        slot_answer(0, new_segment="tpufeed-ab12-w0-3"),
        slot_answer(1),
        slot_answer(
            2, layout=(LAYOUT[0], [("<f4", (100, 8), 0), ("inline", ["c"])]), final=False, times={}
        ),
        slot_answer(3, elements=True, times={"read": (0.5, 7)}),
        slot_answer(4, times=None),
    ]
    encoded, got = round_trip(answers)
    for want, answer in zip(answers, got):
        assert answer._replace(times=answer.times or None, skipped=()) == want._replace(
            times=want.times or None, skipped=()
        )
    assert encoded[1][:1] == b"A" and len(encoded[1]) < len(encoded[0])  # same layout, labels
    assert len(encoded[1]) < 100


def test_values_in_a_layout_are_never_shared_by_two_answers():
    """An inline leaf (an object array, say) is the batch's own: a second batch with the same
    layout must not get the same object, or writing into one would change the other."""
    layout = (("dict", ("text",), (("leaf",),)), [("inline", np.array(["a", None], object))])
    _, got = round_trip(
        [
            slot_answer(0, layout=layout),
            slot_answer(1, layout=layout),
            slot_answer(2, layout=LAYOUT, elements=True),
            slot_answer(3, layout=LAYOUT, elements=True),
        ]
    )
    assert got[0].payload[1][0][1] is not got[1].payload[1][0][1]
    assert got[0].payload[1][0][1].tolist() == got[1].payload[1][0][1].tolist() == ["a", None]
    assert got[2].payload is not got[3].payload


@pytest.mark.parametrize(
    "changes",
    [
        dict(units=[0, 0, 1]),
        dict(outs=[0, 1], last=[False, True]),
        dict(skipped=[{"type": "SourceError", "message": "bad"}]),
        dict(slot=None, payload=[np.arange(3)]),
    ],
)
def test_other_answers_go_pickled_whole(changes):
    answer = slot_answer(7, **changes)
    encoded, [got] = round_trip([answer])
    assert encoded[0][:1] != b"A"
    assert got.task_id == 7 and got.units == answer.units and got.skipped == answer.skipped
    assert got.outs == answer.outs and got.last == answer.last


def test_a_payload_that_cannot_be_pickled_raises_before_anything_is_sent():
    memo = AnswerMemo()
    with pytest.raises((pickle.PicklingError, AttributeError, TypeError)):  # by Python version
        encode_answer(slot_answer(1, layout=(LAYOUT[0], [("inline", [lambda: 1])])), memo)
    assert memo.layout_bytes == b""  # nothing was recorded as sent


def test_tasks_carry_their_indices_skips_and_freed_slots():
    records = np.array([5, 9, 2], np.int64)
    freed, task = decode(
        encode_task(4, 2, records.tobytes(), np.array([0, 1, 0]).tobytes(), [1, 6])
    )
    assert [f.slot for f in freed] == [1, 6]
    assert (task.task_id, task.epoch) == (4, 2)
    assert np.frombuffer(task.indices, np.int64).tolist() == [5, 9, 2]
    assert np.frombuffer(task.skips, np.int64).tolist() == [0, 1, 0]
    assert [f.slot for f in decode(encode_free([0, 2]))[0]] == [0, 2]


def test_the_budgets_messages_go_both_ways():
    assert decode(encode_released(5 << 30)) == ([], Released(5 << 30))
    dropped = pickle.dumps(Dropped([3, 1]), protocol=pickle.HIGHEST_PROTOCOL)
    assert decode_result(dropped, AnswerMemo()) == Dropped([3, 1])
    cramped = pickle.dumps(Cramped(7, 3 << 30), protocol=pickle.HIGHEST_PROTOCOL)
    assert decode_result(cramped, AnswerMemo()) == Cramped(7, 3 << 30)
    assert decode(encode_spill(1 << 40)) == ([], Spill(1 << 40))


def test_the_inbox_reads_every_waiting_message_in_one_read_and_finishes_a_begun_one():
    read_fd, write_fd = os.pipe()
    writer = Connection(write_fd, readable=False)
    inbox = Inbox(read_fd)
    memo = AnswerMemo()
    writer.send_bytes(pickle.dumps(Ready()))
    for i in range(3):
        writer.send_bytes(encode_answer(slot_answer(i), memo))
    got = inbox.read()
    assert isinstance(got[0], Ready) and [a.task_id for a in got[1:]] == [0, 1, 2]
    # A frame larger than one read: the inbox reads on until it is whole.
    big = Failure(9, {"message": "x" * 200_000})
    sender = threading.Thread(target=writer.send_bytes, args=(pickle.dumps(big),))
    sender.start()
    got = []
    while not got:
        got = inbox.read()
    sender.join()
    assert got == [big]
    writer.close()
    with pytest.raises(EOFError):
        inbox.read()
    inbox.close()
