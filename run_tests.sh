#!/usr/bin/env bash
# The test command: installs the project with its test tools, then runs
# ruff (lint and format check) and the test suite (extra arguments go to that pytest run), then the
# simulator's tests again on its pure-Python core (the suite runs the compiled
# core where it is built), so both stay correct.
set -euo pipefail
cd "$(dirname "$0")"
./install.sh test
python3 -m ruff check .
python3 -m ruff format --check .
python3 -m pytest -q "$@"
COMMSIM_PURE_PYTHON=1 python3 -m pytest -q -p no:cacheprovider \
    tests/test_network.py tests/test_simnet.py tests/test_simnet_perf_equivalence.py \
    tests/test_compiled_core.py
