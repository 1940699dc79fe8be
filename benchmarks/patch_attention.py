"""Cost of PatchAttention against the number of patches, at a fixed number of nodes.

Patched attention costs ``O(N M C)`` for the patch transforms plus ``O(P^2 M C)`` for the
softmax over patches (``M = (2K+1)^d`` modes), against ``O(N^2 C)`` for attention over nodes.
Reports forward (and forward+backward) time per patch count, as JSON.

Usage::

    python benchmarks/patch_attention.py [--nodes 20000] [--parts 4 16 64 256] [--device cpu]
"""

from __future__ import annotations

import argparse
import json

import torch

from geoattn.mesh import partition
from geoattn.nn import PatchAttention
from timing import best_time


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=20_000)
    parser.add_argument("--parts", type=int, nargs="+", default=[4, 16, 64, 256])
    parser.add_argument("--channels", type=int, default=32)
    parser.add_argument("--num-heads", type=int, default=4)
    parser.add_argument("--modes", type=int, default=3)
    parser.add_argument("--spectral-qkv", action="store_true")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
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
        with torch.no_grad():
            fwd = best_time(lambda: layer(xd, posd, wd, patch=patch, patch_length=part.length),
                            device, args.repeat)
        xg = xd.clone().requires_grad_(True)
        both = best_time(lambda: layer(xg, posd, wd, patch=patch,
                                       patch_length=part.length).sum().backward(),
                         device, args.repeat)
        rows.append({"nodes": args.nodes, "parts": p, "modes": (2 * args.modes + 1) ** 2,
                     "forward_s": fwd, "forward_backward_s": both})
    print(json.dumps(rows, indent=2))
    return rows


if __name__ == "__main__":
    main()
