"""A byte-level tokenizer: UTF-8 bytes as token ids, no vocabulary file, any language.

Ids: 0 padding, 1 beginning of sequence, 2 end of sequence, byte b -> b + 3 (vocabulary 259).

>>> tok = ByteTokenizer(add_eos=True)
>>> tok({"text": "hé"})["tokens"].tolist(), tok.decode(tok.encode("hé"))
([107, 198, 172, 2], 'hé')
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from tpufeed.errors import InvalidArgumentError

__all__ = ["ByteTokenizer"]


@dataclass(frozen=True)
class ByteTokenizer:
    """element[key] (str or bytes) -> element[output]: int32 token ids.

    `max_length` truncates (after adding bos/eos, keeping eos); `pad_to` truncates and pads to
    a fixed length and adds `{output}_length`, so elements batch (and `PackSequences` can
    unpad them after `batch`). `keep_text=False` drops the text key.
    """

    key: str = "text"
    output: str = "tokens"
    add_bos: bool = False
    add_eos: bool = True
    max_length: int | None = None
    pad_to: int | None = None
    keep_text: bool = False

    PAD: ClassVar[int] = 0
    BOS: ClassVar[int] = 1
    EOS: ClassVar[int] = 2
    OFFSET: ClassVar[int] = 3
    VOCAB_SIZE: ClassVar[int] = 259

    def __post_init__(self) -> None:
        for name in ("max_length", "pad_to"):
            value = getattr(self, name)
            if value is not None and (
                not isinstance(value, int) or isinstance(value, bool) or value < 1
            ):
                raise InvalidArgumentError(
                    f"ByteTokenizer {name} must be a positive int, got {value!r}"
                )

    def encode(self, text: str | bytes) -> np.ndarray:
        if isinstance(text, str):
            text = text.encode("utf-8")
        elif not isinstance(text, (bytes, bytearray, memoryview)):
            raise TypeError(f"ByteTokenizer encodes str or bytes, got {type(text).__name__}")
        ids = np.frombuffer(bytes(text), np.uint8).astype(np.int32) + self.OFFSET
        parts = ([np.array([self.BOS], np.int32)] if self.add_bos else []) + [ids]
        if self.add_eos:
            parts.append(np.array([self.EOS], np.int32))
        tokens = np.concatenate(parts)
        limit = min(x for x in (self.max_length, self.pad_to, tokens.size) if x is not None)
        if limit < tokens.size:
            tokens = tokens[:limit].copy()
            if self.add_eos:
                tokens[-1] = self.EOS
        return tokens

    def decode(self, tokens: Any) -> str:
        """The text of `tokens`, skipping pad/bos/eos; invalid UTF-8 becomes U+FFFD."""
        ids = np.asarray(tokens).reshape(-1)
        data = (ids[ids >= self.OFFSET] - self.OFFSET).astype(np.uint8).tobytes()
        return data.decode("utf-8", errors="replace")

    def __call__(self, element: dict[str, Any]) -> dict[str, Any]:
        if not isinstance(element, dict) or self.key not in element:
            got = sorted(element) if isinstance(element, dict) else type(element).__name__
            raise KeyError(f"ByteTokenizer: key {self.key!r} is missing (the element has {got})")
        tokens = self.encode(element[self.key])
        out = (
            dict(element) if self.keep_text else {k: v for k, v in element.items() if k != self.key}
        )
        if self.pad_to is not None:
            out[f"{self.output}_length"] = np.int32(tokens.size)
            tokens = np.pad(tokens, (0, self.pad_to - tokens.size), constant_values=self.PAD)
        out[self.output] = tokens
        return out
