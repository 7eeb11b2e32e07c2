"""The stages of a pipeline, one per file: what each does to the elements, and how it is named.

Record stages (`Map`, `RandomMap`, `Filter`, `FlatMap`) act on each element on its own, so any
process can run them on any chunk of records. Stream stages (`Pack`, `Batch`) see the elements
in order and run in the process that hands items to the consumer.
"""

from tpufeed.stages.batch import Batch
from tpufeed.stages.filter import Filter
from tpufeed.stages.flat_map import FlatMap
from tpufeed.stages.map import Map, RandomMap
from tpufeed.stages.pack import Pack
from tpufeed.stages.record import Context, Elements, RecordStage, stage_names

Stage = RecordStage | Pack | Batch

__all__ = ["Batch", "Context", "Elements", "Filter", "FlatMap", "Map", "Pack", "RandomMap",
           "RecordStage", "Stage", "stage_names"]
