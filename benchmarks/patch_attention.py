"""Cost of PatchAttention against the number of patches, at a fixed number of nodes.

Patched attention reads every patch's value function at every other patch's nodes by
interpolation (``geoattn.nn.patch_pairs``): ``O(N P C)``, the paper's cost, plus the stencils
(one Delaunay triangulation and ``N P`` point locations per mesh and partition, built once and
reported separately). Earlier versions represented every patch by ``M = (2K+1)^d`` Fourier
coefficients, ``O(N M C + P^2 M C)``, and truncated the value path. Reports forward and
forward+backward time per patch count (best of ``--repeat``, wall and CPU seconds), as JSON.

``--source DIR`` runs the same measurement on another checkout of the package (for example the
version before the interpolated value path: ``git worktree add /tmp/old <commit>``), so the two
versions are compared by one script on the same data.

Usage::

    python benchmarks/patch_attention.py [--nodes 20000] [--parts 16 64 256] [--threads 1]
    python benchmarks/patch_attention.py --source /tmp/old
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from results_page import add_docs_argument, markdown_table, write_page


def _best(fn, repeat: int, sync) -> tuple[float, float]:
    """Fastest wall and CPU seconds of ``repeat`` calls after one warm-up call."""
    fn()
    sync()
    wall, cpu = [], []
    for _ in range(repeat):
        w, c = time.perf_counter(), time.process_time()
        fn()
        sync()
        wall.append(time.perf_counter() - w)
        cpu.append(time.process_time() - c)
    return min(wall), min(cpu)


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=20_000)
    parser.add_argument("--parts", type=int, nargs="+", default=[16, 64, 256])
    parser.add_argument("--channels", type=int, default=32)
    parser.add_argument("--num-heads", type=int, default=4)
    parser.add_argument("--modes", type=int, default=3)
    parser.add_argument("--spectral-qkv", action="store_true")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--source", help="folder holding another version of the geoattn package")
    add_docs_argument(parser)
    args = parser.parse_args(argv)
    if args.source:
        sys.path.insert(0, args.source)
    import torch
    from timing import machine

    from geoattn.mesh import partition
    from geoattn.nn import PatchAttention

    try:
        from geoattn.nn.patch_pairs import patch_pairs
    except ImportError:  # a version before the interpolated value path
        patch_pairs = None
    try:
        from geoattn.nn.patch_attention import PatchSide
    except ImportError:  # a version before PatchSide: the patches as keywords of their own
        PatchSide = None
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    gen = torch.Generator().manual_seed(0)
    pos = torch.rand(args.nodes, 2, generator=gen)
    weight = torch.full((args.nodes,), 1.0 / args.nodes)
    x = torch.randn(args.nodes, args.channels, generator=gen)
    layer = PatchAttention(args.channels, num_heads=args.num_heads, modes=args.modes,
                           spectral_qkv=args.spectral_qkv).to(device)
    rows = []
    for p in args.parts:
        part = partition(pos, weight, p, method="rcb")
        xd, posd, wd, patch = (t.to(device) for t in (x, pos, weight, part.assignment))
        if PatchSide is not None:
            kw = dict(patches=PatchSide(patch, part.length))
        else:
            kw = dict(patch=patch, patch_length=part.length)
        stencils = stencils_cpu = None
        if patch_pairs is not None:
            tic, cpu = time.perf_counter(), time.process_time()
            kw["pairs"] = patch_pairs(posd, wd, patch, p)
            stencils, stencils_cpu = time.perf_counter() - tic, time.process_time() - cpu
        with torch.no_grad():
            fwd = _best(lambda: layer(xd, posd, wd, **kw), args.repeat, sync)
        xg = xd.clone().requires_grad_(True)
        both = _best(lambda: layer(xg, posd, wd, **kw).sum().backward(), args.repeat, sync)
        rows.append({"version": "source" if args.source else "this",
                     "nodes": args.nodes, "parts": p, "threads": args.threads,
                     "stencils_s": stencils, "stencils_cpu_s": stencils_cpu, "forward_s": fwd[0], "forward_cpu_s": fwd[1],
                     "forward_backward_s": both[0], "forward_backward_cpu_s": both[1]})
        print(json.dumps(rows[-1]), flush=True)
    if args.docs:
        keys = ("stencils_s", "stencils_cpu_s", "forward_s", "forward_cpu_s", "forward_backward_s",
                "forward_backward_cpu_s")
        write_page(args.docs, "Patch attention vs number of patches (`benchmarks/patch_attention.py`)",
                   " ".join(["python", "benchmarks/patch_attention.py", *(sys.argv[1:] if argv is None else argv)]),
                   markdown_table(["version", "nodes", "parts", *(k[:-2].replace("_", " ") + " s" for k in keys)],
                                  [[r["version"], r["nodes"], r["parts"],
                                    *("-" if r[k] is None else f"{r[k]:.4f}" for k in keys)] for r in rows]),
                   f"{machine(device)}, load average (1 min) {os.getloadavg()[0]:.1f}; "
                   f"recorded {time.strftime('%Y-%m-%d')}")
    return rows


if __name__ == "__main__":
    main()
