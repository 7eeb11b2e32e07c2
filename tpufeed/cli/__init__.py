"""The `tpufeed` command, one command a module:

- `tpufeed quickstart` (quickstart.py): builds a small real dataset locally and trains on it;
- `tpufeed inspect` (inspection.py): what a dataset or record files hold, and with --verify
  whether every shard is intact;
- `tpufeed bench` (bench.py): runs a pipeline for a while, names its bottleneck and says what
  to change;
- `tpufeed build` (build.py): preprocesses raw files into verified shards and a manifest, with
  Apache Beam;
- `tpufeed cache` (cache.py): shows or empties the local shard cache of gs:// files.

Each adds its own subcommand to the parser (`add_parser`); program.py puts them together and
holds `main`, the console script; arguments.py holds the argument types they share. The
frameworks and a command's heavier modules are imported when that command runs, so
`tpufeed --help` and `tpufeed --version` load none of them.

>>> from tpufeed.cli import main; main(["cache", "ls"])   # doctest: +SKIP
"""

from tpufeed.cli.program import main

__all__ = ["main"]
