"""Byte-level tokenizer and sequence packing: invariants, Dataset.map, and a build."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tpufeed
from tpufeed.errors import InvalidArgumentError
from tpufeed.transforms import ByteTokenizer, PackSequences, pack_sequences


@settings(max_examples=100, deadline=None)
@given(st.text(max_size=40))
def test_tokenizer_round_trips_any_text(text):
    tok = ByteTokenizer(add_bos=True, add_eos=True)
    ids = tok.encode(text)
    assert ids[0] == tok.BOS and ids[-1] == tok.EOS and ids.dtype == np.int32
    assert ids.max() < tok.VOCAB_SIZE
    assert tok.decode(ids) == text


def test_truncation_padding_and_keys():
    tok = ByteTokenizer(max_length=4)
    assert tok.encode("abcdef").tolist() == [100, 101, 102, ByteTokenizer.EOS]
    out = ByteTokenizer(pad_to=6, keep_text=True)({"text": "ab", "id": 1})
    assert out["tokens"].tolist() == [100, 101, 2, 0, 0, 0] and int(out["tokens_length"]) == 3
    assert out["text"] == "ab" and out["id"] == 1
    assert "text" not in ByteTokenizer()({"text": b"raw bytes"})
    with pytest.raises(KeyError, match="'text' is missing"):
        ByteTokenizer()({"body": "x"})
    with pytest.raises(InvalidArgumentError, match="pad_to"):
        ByteTokenizer(pad_to=0)


_seqs = st.lists(st.lists(st.integers(1, 50), max_size=25), max_size=12)


@pytest.mark.parametrize("method", ["first_fit", "best_fit"])
@settings(max_examples=200, deadline=None)
@given(_seqs, st.integers(1, 12), st.integers(1, 4))
def test_packing_invariants(method, seqs, length, max_open):
    arrays = [np.array(s, np.int32) for s in seqs]
    packed = pack_sequences(arrays, length, max_open=max_open, method=method)
    tokens, segments, positions = packed["tokens"], packed["segment_ids"], packed["positions"]
    assert tokens.shape == segments.shape == positions.shape
    assert tokens.shape[1:] == (length,) or tokens.shape[0] == 0
    pieces = []
    for row_tokens, row_segments, row_positions in zip(tokens, segments, positions):
        used = int((row_segments > 0).sum())  # segments fill a prefix, padding the rest
        assert (row_segments[:used] > 0).all() and (row_tokens[used:] == 0).all()
        row_pieces = []
        for segment in range(1, row_segments.max() + 1):
            where = row_segments == segment
            assert where.any()
            assert row_positions[where].tolist() == list(range(where.sum()))
            row_pieces.append(row_tokens[where].tolist())
        pieces += row_pieces
    # every piece of every sequence arrives exactly once
    whole = [s for s in seqs if s]
    assert sorted(map(tuple, pieces)) == sorted(
        tuple(s[i : i + length]) for s in whole for i in range(0, len(s), length)
    )


def test_rows_come_in_the_order_they_fill():
    seqs = [np.arange(1, 7), np.arange(10, 16), np.arange(20, 22)]
    packed = pack_sequences(seqs, 4)
    rows = packed["tokens"].tolist()
    # [1..4] and [10..13] fill rows at once; [14, 15] completes [5, 6]'s row; [20, 21] is last
    assert rows == [[1, 2, 3, 4], [10, 11, 12, 13], [5, 6, 14, 15], [20, 21, 0, 0]]


def test_pack_sequences_forms():
    element = {"tokens": np.array([[5, 6, 0, 0], [7, 8, 9, 0]]), "tokens_length": np.array([2, 3])}
    out = PackSequences(5)(element)
    assert out["tokens"].tolist() == [[5, 6, 7, 8, 9]]
    assert out["segment_ids"].tolist() == [[1, 1, 2, 2, 2]]
    assert out["positions"].tolist() == [[0, 1, 0, 1, 2]]
    fixed = PackSequences(3, num_rows=3)({"tokens": [np.array([1, 2]), np.array([3])]})
    assert fixed["tokens"].shape == (3, 3) and fixed["segment_ids"][1:].sum() == 0
    with pytest.raises(ValueError, match="need 2 rows"):
        PackSequences(2, num_rows=1)({"tokens": [np.array([1, 2]), np.array([3])]})
    rows = PackSequences(2, as_records=True)({"tokens": np.arange(1, 5)})
    assert [r["tokens"].tolist() for r in rows] == [[1, 2], [3, 4]]


def test_best_fit_packs_into_the_rows_dataset_pack_makes():
    sequences = [np.arange(1, 1 + n) for n in (5, 7, 3, 5)]
    with pytest.raises(ValueError, match="need 3 rows"):  # first-fit leaves a 5 alone
        PackSequences(10, max_open=2, num_rows=2)({"tokens": sequences})
    out = PackSequences(10, max_open=2, num_rows=2, method="best_fit")({"tokens": sequences})
    ds = tpufeed.Dataset.from_sequence([{"tokens": s} for s in sequences])
    rows = ds.pack({"tokens": 10}, open_rows=2, method="best_fit").batch(2)
    assert out["tokens"].tolist() == next(iter(rows))["tokens"].tolist()
    assert out["segment_ids"].tolist() == [[1] * 7 + [2] * 3, [1] * 5 + [2] * 5]
    with pytest.raises(InvalidArgumentError, match="PackSequences method .* got 'best'"):
        PackSequences(10, method="best")


def test_tokenize_batch_pack_in_a_dataset():
    texts = [{"text": "x" * n} for n in (3, 9, 1, 4, 7, 2, 5, 6)]
    ds = (
        tpufeed.Dataset.from_sequence(texts)
        .map(ByteTokenizer(pad_to=10))
        .batch(4)
        .map(PackSequences(10, num_rows=4))
    )
    batches = list(ds)
    assert [b["tokens"].shape for b in batches] == [(4, 10), (4, 10)]
    real = sum(int((b["segment_ids"] > 0).sum()) for b in batches)
    assert real == sum(len(t["text"]) + 1 for t in texts)


def test_tokenize_and_pack_in_a_build(tmp_path):
    pytest.importorskip("apache_beam")
    from tpufeed.beam import BuildConfig, build

    with open(tmp_path / "docs.jsonl", "w") as f:
        for text in ("hello world", "a", "packing long documents into rows"):
            f.write(json.dumps({"text": text}) + "\n")
    (tmp_path / "t.py").write_text(
        "from tpufeed.transforms import ByteTokenizer, PackSequences\n"
        "tokenize = ByteTokenizer()\npack = PackSequences(8, as_records=True)\n"
    )
    summary = build(
        BuildConfig(
            inputs=(str(tmp_path / "docs.jsonl"),),
            output=str(tmp_path / "ds"),
            num_shards=2,
            transforms=(f"{tmp_path}/t.py:tokenize", f"{tmp_path}/t.py:pack"),
        )
    )
    assert summary["records_out"] == 2 + 1 + 5
    ds = tpufeed.Dataset.open(tmp_path / "ds")
    assert ds.schema["tokens"]["shape"] == [8] and ds.schema["segment_ids"]["dtype"] == "int32"
    rows = [ds.source[i] for i in range(len(ds.source))]
    text = ByteTokenizer().decode(np.concatenate([r["tokens"] for r in rows[:2]]))
    assert text == "hello world"


# -- Tokenize: any tokenizer, whole chunks at a time -------------------------------------------


def trained_bpe():
    """A small BPE trained here on local text: nothing is downloaded."""
    tokenizers = pytest.importorskip("tokenizers")
    from tokenizers import decoders, models, pre_tokenizers, trainers

    corpus = [f"def function_{i}(x):\n    return x * {i} + {i % 7}\n" for i in range(300)]
    tokenizer = tokenizers.Tokenizer(models.BPE(unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.train_from_iterator(
        corpus, trainers.BpeTrainer(vocab_size=300, special_tokens=["[UNK]", "[EOS]"])
    )
    return tokenizer


class CountingTokenizer:
    """A Hugging Face tokenizer that counts its calls, to see chunks go through at once."""

    def __init__(self, inner):
        self.inner, self.single, self.batches = inner, 0, 0

    def encode(self, text):
        self.single += 1
        return self.inner.encode(text)

    def encode_batch(self, texts):
        self.batches += 1
        return self.inner.encode_batch(texts)


def test_tokenize_with_a_trained_bpe_gives_int32_ids_that_decode_back():
    from tpufeed.transforms import Tokenize

    bpe = trained_bpe()
    out = Tokenize(bpe, eos=1)({"text": "def f(x):\n    return x", "id": 3})
    assert out["tokens"].dtype == np.int32 and out["tokens"][-1] == 1 and out["id"] == 3
    assert bpe.decode(out["tokens"][:-1].tolist()) == "def f(x):\n    return x"


def test_a_pipeline_tokenizes_whole_chunks_with_the_batched_encoder():
    from tpufeed.transforms import Tokenize

    counting = CountingTokenizer(trained_bpe())
    texts = [{"text": f"def g{i}(y): return y + {i}"} for i in range(200)]
    ds = tpufeed.Dataset.from_sequence(texts).map(Tokenize(counting)).pack({"tokens": 64}).batch(4)
    batches = list(ds)
    assert counting.single == 0 and counting.batches == -(-200 // ds._plan().chunk)  # per chunk
    expected = sum(len(counting.inner.encode(t["text"]).ids) for t in texts)
    assert sum(int((b["tokens_segment_ids"] > 0).sum()) for b in batches) == expected
    with_workers = [b["tokens"].tolist() for b in ds.workers(2)]
    assert with_workers == [b["tokens"].tolist() for b in batches]


def test_tokenize_takes_plain_callables_and_the_byte_tokenizer():
    from tpufeed.transforms import Tokenize

    by_char = Tokenize(lambda text: [ord(c) for c in text], key="body", output="ids")
    assert by_char({"body": "ab"})["ids"].tolist() == [97, 98]
    batched = Tokenize(lambda texts: {"input_ids": [[len(t)] for t in texts]}, batched=True)
    assert [e["tokens"].tolist() for e in batched.map_batch([{"text": "abc"}, {"text": ""}])] == [
        [3],
        [0],
    ]
    assert Tokenize(ByteTokenizer(add_eos=False))({"text": "a"})["tokens"].tolist() == [100]
    with pytest.raises(KeyError, match="'text' is missing"):
        Tokenize(ByteTokenizer())({"body": "x"})
