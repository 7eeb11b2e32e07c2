"""Writes a workload's records as MDS with MosaicML Streaming's own MDSWriter (`write_mds`).

    V/bin/python -m benchmarks.mds_data FOLDER W1 SEED COUNT...

Runs under the python of an environment that has Streaming (it pins numpy < 2.2): the records
are `benchmarks.datafiles`'s, shard by shard, so record i is record i of the ArrayRecord
shards; one `bytes` column `record`, shards cut at about the ArrayRecord shards' size.
`done.json` is written last, so an interrupted write is redone.
"""

from __future__ import annotations

import json
import os
import shutil
import sys

from benchmarks.datafiles import _DONE, _shard_records
from benchmarks.workloads import WORKLOADS


def main(argv: list[str]) -> None:
    from streaming import MDSWriter

    folder, name, seed, counts = argv[0], argv[1], int(argv[2]), [int(c) for c in argv[3:]]
    workload = WORKLOADS[name]
    shutil.rmtree(folder, ignore_errors=True)
    # MDS adds 4 bytes of offset and 4 of size to each record.
    limit = max(counts) * (workload.record_bytes + 8) + (1 << 16)
    with MDSWriter(out=folder, columns={"record": "bytes"}, size_limit=limit) as out:
        for shard, count in enumerate(counts):
            for record in _shard_records(workload, seed, shard, count):
                out.write({"record": record})
    with open(os.path.join(folder, _DONE), "w") as f:
        json.dump({"records": sum(counts), "workload": name, "seed": seed}, f)


if __name__ == "__main__":
    main(sys.argv[1:])
