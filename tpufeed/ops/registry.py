"""Every stage a pipeline can hold, and where each may stand in the chain.

Record stages (`Map`, `RandomMap`, `Filter`, `FlatMap`) act on each element on its own, so any
process can run them on any chunk of records. Stream stages (`Pack`, `Batch`) see the elements
in order and run in the process that hands items to the consumer.
"""

from __future__ import annotations

from tpufeed.ops.base import RecordStage
from tpufeed.ops.batch import Batch
from tpufeed.ops.pack import Pack

Stage = RecordStage | Pack | Batch
