"""Tokenize text with any tokenizer, a whole chunk of elements per call where it can.

>>> from tpufeed.transforms import ByteTokenizer
>>> Tokenize(ByteTokenizer(add_eos=False))({"text": "hi"})["tokens"].tolist()
[107, 108]
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from tpufeed.errors import InvalidArgumentError

__all__ = ["Tokenize"]


@dataclass(frozen=True)
class Tokenize:
    """element[key] (str) -> element[output]: int32 token ids.

    `tokenizer` is a Hugging Face `tokenizers.Tokenizer` (its `encode_batch`, which runs in
    Rust over the whole list, encodes each chunk of records at once), anything with an
    `encode(text)` method (`ByteTokenizer`, a `transformers` tokenizer), or a callable
    `text -> ids` (`batched=True`: `list of texts -> list of ids`). Ids may come as lists,
    arrays, objects with `.ids` or dicts with "input_ids". `eos`, if given, ends every
    sequence. In a pipeline, `Dataset.map(Tokenize(...))` hands it whole chunks (`map_batch`).
    """

    tokenizer: Any
    key: str = "text"
    output: str = "tokens"
    batched: bool = False
    eos: int | None = None
    keep_text: bool = False

    def __post_init__(self) -> None:
        if not (callable(self.tokenizer) or hasattr(self.tokenizer, "encode")):
            raise InvalidArgumentError(
                f"Tokenize needs a tokenizer (a callable, or something with "
                f"encode/encode_batch), got {self.tokenizer!r}"
            )

    def __call__(self, element: dict[str, Any]) -> dict[str, Any]:
        return self.map_batch([element])[0]

    def map_batch(self, elements: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        """Every element of a chunk, tokenized in one call of the tokenizer where it allows."""
        texts = [self._text(e) for e in elements]
        out = []
        for element, ids in zip(elements, self._encode(texts)):
            tokens = np.asarray(_ids(ids), dtype=np.int32).reshape(-1)
            if self.eos is not None:
                tokens = np.append(tokens, np.int32(self.eos))
            new = (
                dict(element)
                if self.keep_text
                else {k: v for k, v in element.items() if k != self.key}
            )
            new[self.output] = tokens
            out.append(new)
        return out

    def _text(self, element: Any) -> str:
        if not isinstance(element, dict) or self.key not in element:
            got = sorted(element) if isinstance(element, dict) else type(element).__name__
            raise KeyError(f"Tokenize: key {self.key!r} is missing (the element has {got})")
        text = element[self.key]
        if isinstance(text, bytes):
            text = text.decode("utf-8", errors="replace")
        if not isinstance(text, str):
            raise TypeError(
                f"Tokenize: {self.key!r} must be str or bytes, got {type(text).__name__}"
            )
        return text

    def _encode(self, texts: list[str]) -> list[Any]:
        tokenizer = self.tokenizer
        if hasattr(tokenizer, "encode_batch"):
            return list(tokenizer.encode_batch(texts))
        if self.batched:
            result = tokenizer(texts)
            ids = result["input_ids"] if isinstance(result, dict) else result
            if len(ids) != len(texts):
                raise ValueError(
                    f"Tokenize: the batched tokenizer gave {len(ids)} results for "
                    f"{len(texts)} texts"
                )
            return list(ids)
        if hasattr(tokenizer, "encode"):
            return [tokenizer.encode(text) for text in texts]
        return [tokenizer(text) for text in texts]


def _ids(result: Any) -> Any:
    if hasattr(result, "ids"):
        return result.ids
    if isinstance(result, dict) and "input_ids" in result:
        return result["input_ids"]
    return result
