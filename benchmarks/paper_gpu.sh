#!/usr/bin/env bash
# The paper-scale runs of issue 39 side by side on one lent GPU, each process stopped at a common
# deadline: Burgers (Cao, Table 2a: GT and FT at n = 512 and 2048) and Lorenz-63 operators 1 and 2
# and the controlled ODE (Calvello et al., Figs. 6-9), all with ``--scale "$scale"``.
#
#     bash benchmarks/paper_gpu.sh OUT_DIR [DEADLINE_SECONDS]
#
# Every run writes its table, results and per-epoch metrics under OUT_DIR (model weights are left
# out of OUT_DIR/results.tgz); a run cut off by the deadline leaves its metrics.csv, from which the
# time per epoch on the device can be read. The Burgers samples are solved once, in parallel
# processes, before the models start.
set -u
out=${1:?usage: paper_gpu.sh OUT_DIR [DEADLINE_SECONDS]}
deadline=${2:-480}
scale=${SCALE:-paper}    # SCALE=paper-tiny DEVICE=cpu: the script's own check, in seconds
device=${DEVICE:-cuda}
source "$(dirname "$0")/gpu_env.sh"
work=$(mktemp -d)
mkdir -p "$work/res"
cd "$here"
start=$(date +%s)
python3 galerkin_experiments.py --experiment burgers --scale "$scale" --prepare-data \
    --data-cache "$work/cache" --workers "$(nproc)" 2>&1 | tail -2
echo "burgers data: $(( $(date +%s) - start )) s"
pids=()
mkdir -p "$work/res"
for model in GT FT; do
    for n in 512 2048; do
        timeout "$deadline" python3 galerkin_experiments.py --experiment burgers --scale "$scale" \
            --device "$device" --models "$model" --resolutions "$n" --data-cache "$work/cache" \
            --out "$work/res/burgers-$model-$n" >"$work/res-burgers-$model-$n.log" 2>&1 &
        pids+=($!)
    done
done
for experiment in lorenz1 lorenz2 cde; do
    timeout "$deadline" python3 lorenz_cde.py --experiment "$experiment" --scale "$scale" --device "$device" \
        --no-progress --out "$work/res/$experiment.json" >"$work/res-$experiment.log" 2>&1 &
    pids+=($!)
done
for pid in "${pids[@]}"; do wait "$pid"; echo "process $pid: exit $?"; done
echo "all runs: $(( $(date +%s) - start )) s"
mv "$work"/res-*.log "$work/res/" 2>/dev/null
tar czf "$out/results.tgz" --exclude='*.pt' -C "$work" res
for f in "$work"/res/burgers-*/table.md "$work"/res/*.log; do
    echo "== $f"; tail -n 12 "$f"
done
for f in "$work"/res/burgers-*/runs/*/metrics.csv; do
    echo "== $f: $(($(wc -l <"$f") - 1)) epochs"; tail -n 2 "$f"
done
