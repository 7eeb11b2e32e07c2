"""Which of a build's extra command-line options Apache Beam knows: Beam drops the others with
no more than a log line, so `tpufeed build` refuses them instead (a typo of `--transform`
would otherwise build without the transform).

>>> unknown_beam_args(["--runner", "DataflowRunner", "--transfrom", "prep.py:fn"])  # doctest: +SKIP
['--transfrom', 'prep.py:fn']
"""

from __future__ import annotations

from collections.abc import Sequence

from apache_beam.options.pipeline_options import PipelineOptions, _BeamArgumentParser

from tpufeed.errors import InvalidArgumentError

__all__ = ["beam_option_names", "unknown_beam_args"]


class _Parser(_BeamArgumentParser):
    """Beam's own option parser (the one `PipelineOptions` reads with), raising on bad values."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise InvalidArgumentError(f"Beam pipeline option: {message}")


def _parser() -> _Parser:
    parser = _Parser(allow_abbrev=False, add_help=False)
    subset: dict[str, type] = {}
    for cls in PipelineOptions.__subclasses__():  # as PipelineOptions.get_all_options does
        subset.setdefault(str(cls), cls)
    for cls in subset.values():
        cls._add_argparse_args(parser)
    return parser


def beam_option_names() -> list[str]:
    """Every option string Beam's pipeline options define (`--runner`, `--temp_location`...)."""
    return sorted(option for action in _parser()._actions for option in action.option_strings)


def unknown_beam_args(args: Sequence[str]) -> list[str]:
    """The tokens of `args` that Beam's pipeline options would discard, in order."""
    return list(_parser().parse_known_args(list(args))[1])
