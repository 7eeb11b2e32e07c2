"""How many examples a property test of tests/faults tries: few in the suite, many more under
tests/fuzz_all.sh, which sets TPUFEED_FUZZ_SCALE (every count is multiplied by it).

>>> @examples(20)          # 20 in CI, 20 x TPUFEED_FUZZ_SCALE under the script
... @given(st.binary())
... def test_something(data): ...
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

SCALE = max(1, int(os.environ.get("TPUFEED_FUZZ_SCALE", "1")))
TIMEOUT_S = 900 * SCALE  # a test module's bound (pytest.mark.timeout): a hang fails the test


def examples(count: int) -> settings:
    """Hypothesis settings for `count` examples (times SCALE), with no deadline: the machine
    is shared and a slow example is not a failure (a hang is: pytest-timeout bounds it)."""
    return settings(
        max_examples=count * SCALE,
        deadline=None,
        suppress_health_check=[
            HealthCheck.too_slow,
            HealthCheck.data_too_large,
            HealthCheck.function_scoped_fixture,  # module-scoped data, read only
        ],
    )
