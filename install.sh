#!/usr/bin/env bash
# Installs the project (editable) and what it needs; extras as an argument,
# e.g. ./install.sh test. The simulator core is compiled with Cython when a C
# compiler is present (pure Python otherwise); building without isolation
# lets an unchanged core skip the compile on reinstalls.
set -euo pipefail
cd "$(dirname "$0")"
pip=(python3 -m pip install --quiet --disable-pip-version-check)
export PIP_ROOT_USER_ACTION=ignore
"${pip[@]}" "setuptools>=70.1" "cython>=3.0"
"${pip[@]}" --no-build-isolation -e ".${1:+[$1]}"
# Say which simulator core the install left (a failed compile is not an error).
python3 -c "import simnet._compiled as c; print('commsim installed; simulator core:', c.summary())"
