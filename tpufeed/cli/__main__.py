"""`python -m tpufeed.cli ARGS`: the `tpufeed` command, as the console script runs it."""

import sys

from tpufeed.cli.program import main

if __name__ == "__main__":
    sys.exit(main())
