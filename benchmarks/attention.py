"""Speed and memory of the quadrature-weighted attention layers.

Reports, in one run:

- weighted / unweighted time of softmax attention (log-weight bias vs. no bias, same kernel call);
- attention throughput as a fraction of the measured fp32 matmul rate of this machine;
- peak memory of a ContinuumAttention forward pass at two node counts (it must grow linearly,
  i.e. no N x N matrix is formed);
- GalerkinAttention time for 8x the nodes (linear cost: ideally 8x).

Usage::

    python benchmarks/attention.py [--device cuda] [--nodes 8192] [--memory-nodes 10000 50000]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time

import torch
import torch.nn.functional as F

from geoattn.nn import ContinuumAttention, GalerkinAttention
from geoattn.nn.functional import quadrature_attention
from timing import best_time
from results_page import add_docs_argument, markdown_table, write_page


def matmul_rate(device: torch.device, repeat: int, size: int = 2048) -> float:
    """Measured fp32 matmul rate in FLOP/s."""
    a, b = torch.randn(size, size, device=device), torch.randn(size, size, device=device)
    return 2 * size**3 / best_time(lambda: a @ b, device, repeat)


def weighted_vs_unweighted(n: int, num_heads: int, head_channels: int, device: torch.device,
                           repeat: int) -> dict:
    q, k, v = (torch.randn(1, num_heads, n, head_channels, device=device) for _ in range(3))
    w = torch.rand(1, n, device=device) + 1e-3
    ratios, t_weighted = [], []
    with torch.no_grad():
        for _ in range(repeat):  # interleaved, so load from other processes hits both alike
            tw = best_time(lambda: quadrature_attention(q, k, v, w), device, 1)
            tu = best_time(lambda: F.scaled_dot_product_attention(q, k, v), device, 1)
            ratios.append(tw / tu)
            t_weighted.append(tw)
    flops = 4 * num_heads * n * n * head_channels  # QK^T and PV
    return {"nodes": n, "ratio_weighted_unweighted": statistics.median(ratios),
            "weighted_s": min(t_weighted), "attention_flops_per_s": flops / min(t_weighted)}


def peak_memory_bytes(n: int, channels: int, num_heads: int, device: torch.device) -> int:
    """Peak memory of one ContinuumAttention forward pass beyond its inputs."""
    layer = ContinuumAttention(channels, num_heads=num_heads).to(device)
    x, w = torch.randn(n, channels, device=device), torch.rand(n, device=device)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
        base = torch.cuda.memory_allocated(device)
        with torch.no_grad():
            layer(x, None, w)
        torch.cuda.synchronize(device)
        return torch.cuda.max_memory_allocated(device) - base
    with open("/proc/self/statm") as f:  # resident pages now (Linux)
        base = int(f.read().split()[1]) * resource.getpagesize()
    with torch.no_grad():
        layer(x, None, w)
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - base  # ru_maxrss: KiB


def peak_memory_in_subprocess(n: int, args) -> int:
    """CPU peak memory (peak resident size minus the resident size before the call) needs a
    fresh process per size, because the peak resident size only grows."""
    cmd = [sys.executable, __file__, "--peak-only", str(n), "--channels", str(args.channels),
           "--num-heads", str(args.num_heads), "--device", args.device]
    return int(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)


def galerkin_scaling(n: int, channels: int, num_heads: int, device: torch.device,
                     repeat: int) -> dict:
    """Galerkin time at ``n`` and ``8 n`` nodes, next to one ``nn.Linear(channels, channels)`` on
    the same inputs: a per-node map whose ratio shows what the memory hierarchy alone costs."""
    layer = GalerkinAttention(channels, num_heads=num_heads, dim=2).to(device)
    linear = torch.nn.Linear(channels, channels).to(device)
    times, linear_times = {}, {}
    for m in (n, 8 * n):
        x, pos, w = (torch.randn(m, channels, device=device), torch.rand(m, 2, device=device),
                     torch.rand(m, device=device))
        with torch.no_grad():
            times[m] = best_time(lambda: layer(x, pos, w), device, repeat)
            linear_times[m] = best_time(lambda: linear(x), device, repeat)
    return {"nodes": n, "time_s": times[n], "time_8x_s": times[8 * n],
            "ratio_8x": times[8 * n] / times[n],
            "linear_layer_ratio_8x": linear_times[8 * n] / linear_times[n]}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--nodes", type=int, default=8192, help="nodes for the time ratio")
    parser.add_argument("--num-heads", type=int, default=4)
    parser.add_argument("--channels", type=int, default=128,
                        help="layer width (head_channels = channels / num_heads)")
    parser.add_argument("--memory-nodes", type=int, nargs="+", default=[10_000, 50_000])
    parser.add_argument("--galerkin-nodes", type=int, default=50_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--peak-only", type=int, help=argparse.SUPPRESS)
    add_docs_argument(parser)
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    if args.peak_only:
        print(peak_memory_bytes(args.peak_only, args.channels, args.num_heads, device))
        return 0

    rate = matmul_rate(device, args.repeat)
    ratio = weighted_vs_unweighted(args.nodes, args.num_heads, args.channels // args.num_heads,
                                   device, args.repeat)
    memory = {}
    for n in args.memory_nodes:
        memory[n] = (peak_memory_bytes(n, args.channels, args.num_heads, device)
                     if device.type == "cuda" else peak_memory_in_subprocess(n, args))
    sizes = sorted(memory)
    report = {
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else
        f"cpu ({torch.get_num_threads()} threads)",
        "torch": torch.__version__,
        "fp32_matmul_tflops": rate / 1e12,
        "softmax_attention": {**ratio, "fraction_of_matmul_rate":
                              ratio["attention_flops_per_s"] / rate},
        "peak_memory_mib": {n: memory[n] / 2**20 for n in sizes},
        "peak_memory_growth_vs_nodes": (memory[sizes[-1]] / memory[sizes[0]],
                                        sizes[-1] / sizes[0]),
        "galerkin": galerkin_scaling(args.galerkin_nodes, args.channels, args.num_heads, device,
                                     args.repeat),
    }
    print(json.dumps(report, indent=2))
    if args.docs:
        def rows(d: dict, prefix: str = ""):  # the nested report, one row per number
            for k, v in d.items():
                if isinstance(v, dict):
                    yield from rows(v, f"{prefix}{k} ")
                else:
                    yield [f"{prefix}{k}".replace("_", " "), f"{v:.4g}" if isinstance(v, float) else
                           " / ".join(f"{x:.4g}" for x in v) if isinstance(v, tuple) else v]
        write_page(args.docs, "Attention layers (`benchmarks/attention.py`)",
                   " ".join(["python", "benchmarks/attention.py", *(sys.argv[1:] if argv is None else argv)]),
                   markdown_table(["quantity", "value"], rows({k: v for k, v in report.items()
                                                               if k not in ("device", "torch")})),
                   f"{report['device']}, torch {report['torch']}, load average (1 min) "
                   f"{os.getloadavg()[0]:.1f}; recorded {time.strftime('%Y-%m-%d')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
