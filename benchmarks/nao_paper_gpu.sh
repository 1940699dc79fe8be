#!/usr/bin/env bash
# NAO's radial kernel at the paper's scale (Yu et al., Table 1: L = 2, 20 000 Adam epochs) trained on
# a lent GPU under a deadline, scored on the CPU when it finishes.
#
#     bash benchmarks/nao_paper_gpu.sh OUT_DIR [DEADLINE_SECONDS]
#
# The run checkpoints every 100 epochs. OUT_DIR receives the run folder's files side by side
# (config.json, last.pt, result.json when finished) and radial_paper.json: a run cut off by the
# deadline continues on any device from there, e.g. on the CPU:
#
#     mkdir -p DIR/radial_paper_runs/runs/radial-L2 && cp OUT_DIR/{config.json,last.pt} "$_"
#     python benchmarks/nao.py radial --scale paper --out DIR/radial_paper.json
set -u
out=${1:?usage: nao_paper_gpu.sh OUT_DIR [DEADLINE_SECONDS]}
deadline=${2:-480}
device=${DEVICE:-cuda}
source "$(dirname "$0")/gpu_env.sh"
work=$(mktemp -d)
start=$(date +%s)
timeout "$deadline" python3 "$here/nao.py" radial --scale paper --device "$device" ${NAO_ARGS:-} \
    --out "$work/radial_paper.json" >"$out/nao.log" 2>&1
echo "nao: exit $? after $(( $(date +%s) - start )) s"
tr '\r' '\n' <"$out/nao.log" | grep -v "^NAO: \|^baselines: " | tail -n 12
cp "$work"/radial_paper_runs/runs/radial-L2/* "$work"/radial_paper.json "$out"/ 2>/dev/null
[ -f "$out/last.pt" ] && python3 - "$out/last.pt" <<'EOF'
import sys, torch
state = torch.load(sys.argv[1], weights_only=True, map_location="cpu")
h = state["history"]
print(f"checkpoint: {len(h)} epochs in {state['seconds']:.0f} s ({1e3 * state['seconds'] / max(len(h), 1):.1f} ms "
      f"an epoch); training E_f at epochs 1000, 5000, 10000, 15000, last: "
      + ", ".join(f"{h[i - 1]:.4f}" for i in (1000, 5000, 10000, 15000) if i <= len(h)) + f", {h[-1]:.4f}")
EOF
