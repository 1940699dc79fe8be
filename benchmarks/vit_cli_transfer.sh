#!/usr/bin/env bash
# ViT-NO and FANO through the command line with default settings: trained on one mesh of the unit
# square, scored directly on a refined, a graded and a structured mesh of it (issue 55).
#
#     bash benchmarks/vit_cli_transfer.sh OUT [GRF ...]      (default GRFs: cao calvello)
#
# For each Gaussian random field preset (`geoattn generate --grf`): 120 lognormal Darcy samples on
# the four meshes of meshes/ (289-node irregular training mesh, its 1 089-node refinement, the
# graded and the structured 289-node meshes), `geoattn train --model vit|fano` with nothing but
# the mesh given (the defaults), and `geoattn evaluate` on the 12 samples held out of training
# (--skip 108). Each evaluation's table is kept in OUT/eval_<grf>_<model>.txt; a rerun skips
# finished steps. One torch thread per step.
set -euo pipefail
out=${1:?usage: vit_cli_transfer.sh OUT [GRF ...]}
shift
grfs=("$@")
[ $# -eq 0 ] && grfs=(cao calvello)
meshes=$(cd "$(dirname "$0")/../meshes" && pwd)
mkdir -p "$out"
cd "$out"
export OMP_NUM_THREADS=1
for grf in "${grfs[@]}"; do
  [ -f "$grf.h5" ] || geoattn generate darcy --mesh "train=$meshes/square_irregular.vtu" \
      --mesh "refined=$meshes/square_irregular_refined.vtu" --mesh "graded=$meshes/square_graded.vtu" \
      --mesh "structured=$meshes/square_structured.vtu" --n 120 --seed 0 --family lognormal --grf "$grf" \
      --out "$grf.h5" --no-progress
  for model in vit fano; do
    [ -f "run_${grf}_$model/last.pt" ] || geoattn train "$grf.h5" --mesh train --model "$model" \
        --out "run_${grf}_$model" --no-progress
    geoattn evaluate "run_${grf}_$model/last.pt" "$grf.h5" --skip 108 > "eval_${grf}_$model.txt"
    echo "$grf $model"; cat "eval_${grf}_$model.txt"
  done
done
