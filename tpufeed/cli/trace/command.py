"""`tpufeed trace merge HOST_FILES... -o pod.json`: one Perfetto / Chrome trace of the pod, a
process group per host, on process 0's clock, with how close the alignment is.

Each host writes its own trace file (`tpufeed.trace(path)` or `options(trace=path)`); in a
multi-host run, each also measures its clock's offset to process 0's through the store the
hosts share (`tpufeed.run.hosts.clock_offset`) and keeps it in the file.

>>> main(["trace", "merge", "host0.json", "host1.json", "-o", "pod.json"])   # doctest: +SKIP
"""

from __future__ import annotations

import argparse
from typing import Any

from tpufeed.cli.arguments import Subcommands
from tpufeed.cli.json_output import TRACE_MERGE, add_json_option

__all__ = ["add_parser", "run_command"]


def add_parser(sub: Subcommands) -> None:
    """`tpufeed trace merge FILES... -o OUTPUT [--json]`."""
    trace = sub.add_parser(
        "trace",
        help="merge the hosts' trace files into one timeline of the pod",
        description="`merge`: the trace files of a run's hosts (tpufeed.trace(path) or "
        "options(trace=path) on each) as one Perfetto / Chrome trace file, a process group per "
        "host named 'host N: hostname (pid P)', every event on process 0's clock by the offsets "
        "the hosts measured through their store; it prints how close the alignment is (files "
        "without an offset are aligned by wall clock only, and say so).",
    )
    trace.add_argument("action", choices=["merge"], help="merge: the files into one")
    trace.add_argument(
        "files", nargs="+", metavar="FILES", help="one trace file per host, in any order"
    )
    trace.add_argument(
        "-o",
        "--output",
        required=True,
        help="the merged file to write (replaced if it exists; never one of FILES)",
    )
    add_json_option(trace, TRACE_MERGE)
    trace.set_defaults(run=run_command)


def run_command(args: argparse.Namespace) -> int:
    from tpufeed.cli.trace.merge import merge

    merged = merge(list(args.files), args.output)
    if args.json:
        TRACE_MERGE.emit(merged)
        return 0
    _print(merged)
    return 0


def _print(merged: dict[str, Any]) -> None:
    hosts = merged["hosts"]
    print(
        f"wrote {merged['output']}: {len(hosts)} host{'s' if len(hosts) != 1 else ''}, "
        f"{merged['events']:,} events (open it in https://ui.perfetto.dev)"
    )
    for host in sorted(hosts, key=lambda h: h["host"]):
        who = f"{host['hostname']} (pid {host['pid']})" if host["hostname"] else "?"
        if host["offset_ns"] is not None:
            clock = f"offset {host['offset_ns'] / 1e6:+,.3f} ms ±{host['error_ns'] / 1e6:.3f} ms"
        else:
            clock = host["aligned_by"]
        print(f"  host {host['host']}: {who}  {host['file']}  {clock}")
    print(f"alignment: {merged['alignment']['statement']}")
