#!/usr/bin/env bash
# Every property-based test of tests/faults with many examples, the slow ones included: codec
# bytes, command lines, and whatever else lives there (manifests, states). The suite (and CI)
# runs the same tests with few examples; this is the long run, for a night or a release.
#
#   tests/fuzz_all.sh                             # 20 times the suite's examples
#   TPUFEED_FUZZ_SCALE=200 tests/fuzz_all.sh -x   # more; extra arguments go to pytest
#
# Each test tries `examples(n)` of tests/faults/budget.py times TPUFEED_FUZZ_SCALE, and its
# time bound grows with it. A failure prints the smallest example found and the seed that
# reproduces it; hypothesis also keeps it in .hypothesis/ and tries it first next time.
set -euo pipefail
cd "$(dirname "$0")/.."
export TPUFEED_FUZZ_SCALE="${TPUFEED_FUZZ_SCALE:-20}"
exec python -m pytest -q -m "" --hypothesis-show-statistics tests/faults "$@"
