#!/usr/bin/env bash
# The project's main job: ./run_training.sh [config.json [OPTIONS]]
# Installs what it needs, runs the configured workload for real over MPI
# (measuring bandwidth and traffic), predicts it with simnet, and writes both
# and their comparison to logging.log_dir (results/ for the seed config).
set -euo pipefail
# Options after the configuration go to the job (--host-params FILE, --no-host-model,
# --recalibrate, --out DIR; see --help). The configuration path is taken from where
# the command runs, before the cd.
config="$(realpath -- "${1:-$(dirname "$0")/config.json}")"
shift || true
cd "$(dirname "$0")"
./install.sh
exec python3 -m workflows.endtoend --config "$config" "$@"
