#!/usr/bin/env bash
# The project's main job: ./run_training.sh [config.json]
# Installs what it needs, runs the configured workload for real over MPI
# (measuring bandwidth and traffic), predicts it with simnet, and writes both
# and their comparison to logging.log_dir (results/ for the seed config).
set -euo pipefail
cd "$(dirname "$0")"
PIP_ROOT_USER_ACTION=ignore python3 -m pip install --quiet --disable-pip-version-check -e .
exec python3 -m simnet.endtoend --config "${1:-config.json}"
