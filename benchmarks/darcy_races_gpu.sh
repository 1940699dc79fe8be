#!/usr/bin/env bash
# Both Darcy races of issue 53 on one lent GPU inside a deadline (benchmarks/darcy_gpu_races.py):
# the square and the per-sample domains (random_holes) at 4 225 nodes, 1 000 training samples,
# multigrid, mesh_fno and neuralop-fno each in its own process, all at once on the device, the
# same training time each, the data generation included in the deadline.
#
#     bash benchmarks/darcy_races_gpu.sh OUT_DIR [DEADLINE_SECONDS]     # default 420
#     SCALE=tiny bash benchmarks/darcy_races_gpu.sh OUT_DIR 60          # smoke test, same code path
#
# Environment: SCALE (race-gpu), DEVICE (cuda), WORKERS (10 data processes), RACE_ARGS (more
# options of darcy_gpu_races.py). Without scikit-fem, meshio or neuralop importable, the wheels in
# the repository's .whl folder (all but gmsh) are installed into /tmp/site first.
# Writes OUT_DIR/summary.md (printed at the end), OUT_DIR/RACE/{results.json,table.md} and
# OUT_DIR/RACE/MODEL/{results.json,table.md,run.log}.
set -u
start=$(date +%s)
out=${1:?usage: darcy_races_gpu.sh OUT_DIR [DEADLINE_SECONDS]}
deadline=${2:-420}
root=$(cd "$(dirname "$0")/.." && pwd)
export PYTHONWARNINGS=ignore
if ! python3 -c "import skfem, meshio, neuralop" 2>/dev/null && [ -d "$root/.whl" ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site \
        $(ls "$root"/.whl/*.whl | grep -v '/gmsh-') || exit 1
    export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
source "$(dirname "$0")/gpu_env.sh"
left=$(( deadline - ($(date +%s) - start) ))
python3 "$here/darcy_gpu_races.py" --out "$out" --deadline "$left" --scale "${SCALE:-race-gpu}" \
    --device "${DEVICE:-cuda}" --workers "${WORKERS:-10}" ${RACE_ARGS:-}
