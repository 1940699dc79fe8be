"""Forward time and peak memory of every geoattn model as the number of nodes grows.

Each (model, N) runs in a fresh process: build the model (width 32, depth 2, float32), draw N
uniform random nodes of the unit square with uniform weights, run one untimed and one timed
forward pass without gradients, and report the seconds and the peak resident memory added by
the forward passes (``ru_maxrss`` after minus before; CPU), or with ``--device cuda`` the time between
synchronisations of the device and the CUDA allocator's peak above the memory held before the
passes (the model and the inputs). A run that exceeds ``--timeout`` seconds is reported as such. Quadratic-cost models (TNO's dense attention) are not tried beyond
``--quadratic-max`` nodes. Run ``python benchmarks/scale.py [--nodes 1e4 1e5 1e6] [--device cuda]``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time

from results_page import add_docs_argument, markdown_table, write_page

#: constructor keywords per model (beyond width and depth) and whether its cost is linear in N
MODELS = {
    "tno": ({"num_heads": 4}, False),
    "galerkin": ({"num_heads": 4}, True),
    "slice": ({"num_heads": 4, "num_slices": 32}, True),
    "mesh_fno": ({"modes": 4}, True),
    "gno": ({}, True),  # radius set per N for about 16 neighbours
    "vit": ({"num_heads": 4, "num_patches": 16, "modes": 2}, True),
    "fano": ({"num_heads": 4, "num_patches": 16, "modes": 2}, True),
}

_RUN = """
import json, math, resource, sys, time
import torch
from geoattn.models import build_model
torch.set_num_threads({threads})
name, n, kw, device = {name!r}, {n}, {kw!r}, torch.device({device!r})
cuda = device.type == "cuda"
if name == "gno":
    kw = dict(kw, radius=math.sqrt(16 / (math.pi * n)))
torch.manual_seed(0)
model = build_model(name, in_channels=1, out_channels=1, dim=2, width=32, depth=2, **kw).eval().to(device)
pos = torch.rand(n, 2, device=device)
x, w = torch.sin(6 * pos[:, :1]), torch.full((n,), 1.0 / n, device=device)
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
with torch.no_grad():
    model(x, pos, w)
    if cuda:
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        held = torch.cuda.memory_allocated(device)
    tic = time.perf_counter()
    out = model(x, pos, w)
    if cuda:
        torch.cuda.synchronize(device)
    seconds = time.perf_counter() - tic
if cuda:
    peak = (torch.cuda.max_memory_allocated(device) - held) / 2**20
else:
    peak = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
print(json.dumps({{"seconds": seconds, "peak_mib": peak, "finite": bool(torch.isfinite(out).all())}}))
"""


def run(name: str, n: int, threads: int, timeout: float, device: str = "cpu") -> dict:
    kw, _ = MODELS[name]
    code = _RUN.format(threads=threads, name=name, n=n, kw=kw, device=device)
    try:
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"status": f"over {timeout:.0f} s"}
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["?"])[-1]
        return {"status": f"failed: {last[:80]}"}
    return {"status": "ok", **json.loads(proc.stdout.strip().splitlines()[-1])}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=float, nargs="+", default=[1e4, 1e5, 1e6])
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=120.0)
    parser.add_argument("--quadratic-max", type=float, default=1e5)
    parser.add_argument("--device", default="cpu", help="cpu, or cuda: device time and CUDA allocator peak")
    add_docs_argument(parser)
    args = parser.parse_args(argv)
    results, rows = {}, []
    load_start = os.getloadavg()
    print(f"{'model':<10}{'nodes':>10}{'forward s':>12}{'peak MiB':>10}  status")
    for name in args.models:
        for n in map(int, args.nodes):
            if not MODELS[name][1] and n > args.quadratic_max:
                r = {"status": "not tried (quadratic cost)"}
            else:
                r = run(name, n, args.threads, args.timeout, args.device)
            results[f"{name}@{n}"] = r
            secs = f"{r['seconds']:.3f}" if "seconds" in r else "-"
            mem = f"{r['peak_mib']:.0f}" if "peak_mib" in r else "-"
            print(f"{name:<10}{n:>10}{secs:>12}{mem:>10}  {r['status']}", flush=True)
            rows.append([name, n, secs, mem, r["status"].replace("|", "/")])
    if args.docs:
        if args.device == "cpu":
            machine = os.uname().machine
        else:
            import torch  # this process needs torch only to name the GPU

            from timing import machine as describe
            machine = describe(torch.device(args.device))
        write_page(args.docs, "Forward cost of every model at 10⁴–10⁶ nodes (`benchmarks/scale.py`)",
                   " ".join(["python", "benchmarks/scale.py", *(sys.argv[1:] if argv is None else argv)]),
                   markdown_table(["model", "nodes", "forward s", "peak MiB", "status"], rows),
                   f"{machine}; {args.threads} torch thread(s) per run, load average "
                   f"(1 min) {load_start[0]:.1f}–{os.getloadavg()[0]:.1f}; recorded {time.strftime('%Y-%m-%d')}")
    return results


if __name__ == "__main__":
    main()
