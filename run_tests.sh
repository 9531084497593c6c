#!/usr/bin/env bash
# The test command: installs the project with its test tools, then runs
# ruff and the test suite. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")"
PIP_ROOT_USER_ACTION=ignore python3 -m pip install --quiet --disable-pip-version-check -e ".[test]"
python3 -m ruff check .
python3 -m pytest -q "$@"
