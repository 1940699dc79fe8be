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
#
# SEEDS="0 1 2" (environment; default 0) trains one model per seed (`geoattn train --seed`; seed 0
# in OUT/run_<grf>_<model>, seed k in OUT/run_<grf>_<model>_seed<k>, its table in
# OUT/eval_<grf>_<model>_seed<k>.txt) and ends with each mesh's ratio per seed and their mean.
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
    for seed in ${SEEDS:-0}; do
      tag="${grf}_$model"; [ "$seed" = 0 ] || tag="${tag}_seed$seed"
      [ -f "run_$tag/last.pt" ] || geoattn train "$grf.h5" --mesh train --model "$model" --seed "$seed" \
          --out "run_$tag" --no-progress
      geoattn evaluate "run_$tag/last.pt" "$grf.h5" --skip 108 > "eval_$tag.txt"
      echo "$grf $model seed $seed"; cat "eval_$tag.txt"
    done
  done
done
# each mesh's ratio (error / training-mesh error) per seed, and the mean over the seeds
python - "${grfs[@]}" <<'PY'
import glob, re, statistics, sys
for grf in sys.argv[1:]:
    for model in ("vit", "fano"):
        ratios = {}
        for path in sorted(glob.glob(f"eval_{grf}_{model}.txt") + glob.glob(f"eval_{grf}_{model}_seed*.txt")):
            errors = {row[0]: float(row[2]) for row in map(str.split, open(path))
                      if len(row) == 4 and re.fullmatch(r"[0-9.]+", row[2])}
            for mesh, error in errors.items():
                ratios.setdefault(mesh, []).append(error / errors["train"])
        print(f"{grf} {model}: " + "; ".join(f"{mesh} {statistics.fmean(r):.3f} ({' '.join(f'{v:.3f}' for v in r)})"
                                            for mesh, r in ratios.items() if mesh != "train"))
PY
