"""TFRecord files: the source (`source`), the framing and its verified scan (`framing`), and the
offset index kept beside each file (`index`).

>>> from tpufeed.sources.tfrecord import write_tfrecords
"""

from tpufeed.sources.tfrecord.source import (
    TFRecordFile,
    TFRecordSource,
    default_index_dir,
    write_tfrecords,
)

__all__ = ["TFRecordFile", "TFRecordSource", "default_index_dir", "write_tfrecords"]
