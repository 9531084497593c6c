#!/usr/bin/env bash
# The project's main job. Installs what it needs, then runs the GPT-2 proxy
# on this machine and writes its results under results/.
set -euo pipefail
cd "$(dirname "$0")"
python3 -m pip install --quiet --disable-pip-version-check -e .
NP="${NP:-8}"
mkdir -p results
mpiexec -n "$NP" python3 -m proxies.gpt2 --scale "${SCALE:-0.1}" \
    --json results/gpt2.json --trace results/gpt2.trace.json
echo "results: results/gpt2.json, results/gpt2.trace.json (open in Perfetto / chrome://tracing)"
