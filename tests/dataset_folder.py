"""A dataset folder (shards and manifest.json) written as the Beam stage writes one, without
running Beam: for tests of `Dataset.open` and the readers behind it."""

from __future__ import annotations

import os

from tpufeed import codec
from tpufeed.beam.write.schema import RecordSummary
from tpufeed.beam.write.shard_files import manifest_text
from tpufeed.sources.array_record import write_array_records
from tpufeed.sources.built.manifest import FORMAT, FORMAT_VERSION, file_crc32c
from tpufeed.sources.tfrecord import write_tfrecords


def make_dataset(root, shards: list[list], file_format: str = "array_record") -> dict:
    """Writes `shards` (lists of dicts, or of bytes) and a manifest as the Beam stage would."""
    os.makedirs(root, exist_ok=True)
    raw = any(isinstance(r, bytes) for shard in shards for r in shard)
    entries, summary = [], RecordSummary()
    ext = ".array_record" if file_format == "array_record" else ".tfrecord"
    write = write_array_records if file_format == "array_record" else write_tfrecords
    for i, records in enumerate(shards):
        data = [r if raw else codec.encode(r) for r in records]
        for record, blob in zip(records, data):
            summary.add(None if raw else record, len(blob))
        name = f"data-{i:05d}-of-{len(shards):05d}{ext}"
        write(os.path.join(root, name), data)
        size, crc = file_crc32c(os.path.join(root, name))
        entries.append(
            {"path": name, "num_records": len(records), "num_bytes": size, "crc32c": crc}
        )
    manifest = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "tpufeed_version": "test",
        "file_format": file_format,
        "record_format": "bytes" if raw else "tpufeed.codec",
        "num_records": summary.count,
        "shards": entries,
        "schema": None if raw else summary.schema(),
        "statistics": summary.statistics(),
        "build": {},
    }
    write_manifest(root, manifest)
    return manifest


def write_manifest(root, manifest: dict) -> None:
    with open(os.path.join(root, "manifest.json"), "w") as f:
        f.write(manifest_text(manifest))
