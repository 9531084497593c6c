#!/usr/bin/env bash
# The project's main job: ./run_training.sh [config.json] [OPTIONS]
# Installs what it needs, runs the configured workload for real over MPI
# (measuring bandwidth and traffic), predicts it with simnet, and writes both
# and their comparison to logging.log_dir (results/ for the seed config).
set -euo pipefail
# Options go to the job (--host-params FILE, --no-host-model, --recalibrate, --out DIR;
# see --help), with or without a configuration before them (without: the checkout's
# config.json). Every path, the configuration's and the options', is taken from where
# the command runs, before the cd into the checkout.
here="$(cd "$(dirname "$0")" && pwd)"
abs() { # a path as given from the caller's folder (it need not exist yet)
    if [[ -z "$1" || "$1" == /* ]]; then printf '%s' "$1"; else printf '%s' "$PWD/$1"; fi
}
config="$here/config.json"
if [[ $# -gt 0 && "$1" != -* ]]; then
    config="$(abs "$1")"
    shift
fi
args=()
help=0
while [[ $# -gt 0 ]]; do
    case "$1" in
        -h | --help) help=1 ;;
        --out | --host-params | --config)
            args+=("$1")
            shift
            # (a missing value is left to the job to refuse)
            [[ $# -gt 0 ]] && args+=("$(abs "$1")")
            [[ $# -gt 0 ]] || break
            shift
            continue
            ;;
        --out=* | --host-params=* | --config=*) args+=("${1%%=*}=$(abs "${1#*=}")"); shift; continue ;;
    esac
    args+=("$1")
    shift
done
cd "$here"
if ((help)); then
    # The help needs the project's imports: printed without installing when they are
    # there, after installing otherwise.
    python3 -m workflows.endtoend --help 2>/dev/null || { ./install.sh && python3 -m workflows.endtoend --help; }
    exit
fi
./install.sh
exec python3 -m workflows.endtoend --config "$config" ${args[@]+"${args[@]}"}  # (bash < 4.4: an empty array is unset)
