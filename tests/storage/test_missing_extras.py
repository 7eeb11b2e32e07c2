"""A store's package missing (a fresh `pip install tpufeed`, without the gcs or s3 extra): the
first gs:// or s3:// path names the extra to install, from every call that meets it (issue 47:
a single gs:// object said "No module named 'google.api_core'", wrapped as a failed request).

Each case runs in a fresh process where importing the store's package fails as it does where it
is not installed."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

_HIDE = """
import sys

class NotInstalled:
    def find_spec(self, name, path=None, target=None):
        if name == {top!r} or name.startswith({top!r} + "."):
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)

sys.meta_path.insert(0, NotInstalled())
import tpufeed

try:
    {call}
except tpufeed.TpufeedError as e:
    print(type(e).__name__, e)
"""


@pytest.mark.parametrize(
    "scheme, top, extra, package",
    [("gs", "google", "gcs", "google-cloud-storage"), ("s3", "boto3", "s3", "boto3")],
)
@pytest.mark.parametrize(
    "call",
    [
        "tpufeed.Dataset.from_array_record('{scheme}://bucket/train.array_record')",
        "tpufeed.Dataset.from_tfrecord('{scheme}://bucket/train-*.tfrecord')",
        "tpufeed.Dataset.open('{scheme}://bucket/dataset')",
    ],
)
def test_a_missing_store_package_names_the_extra(scheme, top, extra, package, call):
    code = _HIDE.format(top=top, call=call.format(scheme=scheme))
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == (
        f"MissingDependencyError {package} is not installed; install it with "
        f"`pip install tpufeed[{extra}]`"
    )
