#!/usr/bin/env bash
# The Darcy race at the GPU scale of issue 38 on one lent GPU: the square's 4 225-node training
# mesh, 1 000 training and 200 test samples (piecewise), every model given the same training time,
# all models running at once on the device (so they share it alike), then one combined table.
#
#     bash benchmarks/darcy_race_gpu.sh OUT_DIR [SECONDS] [MODEL ...]
#
# Each model writes OUT_DIR/MODEL/{results.json,table.md,run.log}; OUT_DIR/table.md combines them.
set -u
out=${1:?usage: darcy_race_gpu.sh OUT_DIR [SECONDS] [MODEL ...]}
seconds=${2:-240}
shift $(( $# > 1 ? 2 : 1 ))
models=("$@")
[ ${#models[@]} -gt 0 ] || models=(multigrid mesh_fno neuralop-fno)
device=${DEVICE:-cuda}
export PYTHONWARNINGS=ignore
source "$(dirname "$0")/gpu_env.sh"
workers=${WORKERS:-$(( $(nproc) / ${#models[@]} ))}
start=$(date +%s)
pids=()
for model in "${models[@]}"; do
    mkdir -p "$out/$model"
    python3 "$here/darcy_compare.py" --scale race-gpu --device "$device" --families piecewise --models "$model" \
        --seconds "$seconds" --data-workers "$(( workers > 0 ? workers : 1 ))" ${RACE_ARGS:-} \
        --out "$out/$model" >"$out/$model/run.log" 2>&1 &
    pids+=($!)
done
for pid in "${pids[@]}"; do wait "$pid"; echo "process $pid: exit $?"; done
echo "all models: $(( $(date +%s) - start )) s"
python3 "$here/darcy_compare.py" --combine "$out"/*/results.json --out "$out" | tail -n 30
for model in "${models[@]}"; do echo "== $model"; tail -n 4 "$out/$model/run.log"; done
