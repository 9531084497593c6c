#!/usr/bin/env bash
# Installs the project (editable) and what it needs into the Python that `python3`
# names (a venv's or conda env's when one is active, else the system's); extras as an
# argument, e.g. ./install.sh test. The simulator core is compiled with Cython when a
# C compiler is present (pure Python otherwise); building without isolation lets an
# unchanged core skip the compile on reinstalls. An install that is up to date (same
# Python, extras, packaging files and compiled sources, and everything importable)
# is skipped: pip alone takes seconds.
set -euo pipefail
cd "$(dirname "$0")"
stamp=".install-stamp${1:+-$1}"
checkout="$PWD"
want="$(python3 -c 'import sys; print(sys.executable)') ${1:-} $(
    cat pyproject.toml setup.py simnet/*.pxd simnet/*.pyx simnet/network.py simnet/executor.py | sha256sum
)"
extras=""
[[ "${1:-}" == test ]] && extras='"pytest", "ruff",'
check="import importlib.util as u, os, simnet._compiled as c, proxies, workflows, mpi4py, simpy
for m in ($extras \"networkx\", \"pydantic\", \"psutil\", \"matplotlib\", \"seaborn\", \"chakra\", \"google.protobuf\"):
    assert u.find_spec(m), m
here = os.path.realpath(os.path.dirname(os.path.dirname(proxies.__file__)))
assert here == os.path.realpath(os.environ[\"COMMSIM_CHECKOUT\"]), here  # from this one
assert \"stale\" not in c.summary(), c.summary()  # sources touched since the build
print(\"commsim up to date; simulator core:\", c.summary())"
# Checked from / so that the installed package is imported, not this folder's.
if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" ]] \
    && (cd / && COMMSIM_CHECKOUT="$checkout" python3 -c "$check") 2>/dev/null; then
    exit 0
fi
pip=(python3 -m pip install --quiet --disable-pip-version-check)
export PIP_ROOT_USER_ACTION=ignore
"${pip[@]}" "setuptools>=70.1" "cython>=3.0"
"${pip[@]}" --no-build-isolation -e ".${1:+[$1]}"
# Chakra's schema only: its package's declared dependencies serve its PyTorch-trace
# converters and visualisers (HolisticTraceAnalysis, a notebook stack), unused here.
"${pip[@]}" --no-deps "mlc-chakra>=1.0"
# Say which simulator core the install left (a failed compile is not an error).
core="$(python3 -c "import simnet._compiled as c; print(c.summary())")"
echo "commsim installed; simulator core: $core"
# A core left in pure Python (no C compiler yet) is built again by the next install.
if [[ "$core" == compiled* ]]; then
    printf '%s\n' "$want" > "$stamp"
fi
