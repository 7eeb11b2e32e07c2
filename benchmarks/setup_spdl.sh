#!/usr/bin/env bash
# The SPDL rows of W4 (benchmarks/vision_spdl.py): Meta's spdl wheel and the FFmpeg shared
# libraries it loads at its first decode, which the wheel does not carry. Debian 12's FFmpeg is
# 5.1 (libavcodec59...), one of the versions spdl_io has bindings for. A benchmark's own setup:
# neither tpufeed's install nor CI's suite needs it (the SPDL smoke test skips without it).
#
#   bash benchmarks/setup_spdl.sh        (as root, or with sudo for apt-get)
set -euo pipefail
cd "$(dirname "$0")/.."

sudo=""
if [ "$(id -u)" != 0 ]; then sudo="sudo"; fi
$sudo apt-get update -q
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q \
    libavutil57 libavcodec59 libavformat59 libavfilter8 libswscale6 libswresample4 libavdevice59
# the version measured in benchmarks/RESULTS.md; numpy stays at the tested set's pin
python -m pip install "spdl==0.8.0" -c constraints/ci.txt
python -c "import importlib.metadata as m, spdl.io; spdl.io.decode_config(); print('spdl', m.version('spdl'), 'and its FFmpeg libraries: ready')"
