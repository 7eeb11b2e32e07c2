"""Reusable transforms, the same online (`Dataset.map` / `random_map`) and offline (`tpufeed build`).

Deterministic transforms are `fn(element) -> element`; random ones are `fn(element, rng)`.
Data problems raise KeyError / ValueError naming the key; the pipeline that runs the
transform wraps them in a `tpufeed.TransformError` naming the record and its file.
Pillow (images) is imported on first use: `pip install tpufeed[images]`.

>>> from tpufeed.transforms import ByteTokenizer, PackSequences
>>> PackSequences(8)(ByteTokenizer()({"text": "hi"}))["segment_ids"].tolist()
[[1, 1, 1, 0, 0, 0, 0, 0]]
"""

from tpufeed.transforms.color import ColorJitter
from tpufeed.transforms.crops import RandomResizedCrop, ResizedCenterCrop, sample_crop_box
from tpufeed.transforms.example import ParseExample, encode_example, parse_example
from tpufeed.transforms.features import Cast, Rename, Select
from tpufeed.transforms.image import (
    CenterCrop,
    DecodeImage,
    Normalize,
    RandomCrop,
    RandomFlip,
    Resize,
    decode_image,
)
from tpufeed.transforms.packing import PackSequences, pack_sequences
from tpufeed.transforms.text import ByteTokenizer
from tpufeed.transforms.tokenize import Tokenize

__all__ = [
    "ByteTokenizer",
    "Cast",
    "CenterCrop",
    "ColorJitter",
    "DecodeImage",
    "Normalize",
    "PackSequences",
    "ParseExample",
    "RandomCrop",
    "RandomFlip",
    "RandomResizedCrop",
    "Rename",
    "Resize",
    "ResizedCenterCrop",
    "Select",
    "Tokenize",
    "decode_image",
    "encode_example",
    "pack_sequences",
    "parse_example",
    "sample_crop_box",
]
