"""Timing helper shared by the benchmark scripts (imported from scripts run in this folder)."""

from __future__ import annotations

import platform
import time

import torch


def sync(device: torch.device) -> None:
    """Wait for queued GPU work so that wall-clock timings are honest."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def best_time(fn, device: torch.device, repeat: int, warmup: bool = True) -> float:
    """Fastest of ``repeat`` timed calls (seconds), after one untimed warm-up call unless
    ``warmup=False`` (for calls too slow to repeat, or whose first run is the one to time)."""
    if warmup:
        fn()
        sync(device)
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        sync(device)
        times.append(time.perf_counter() - start)
    return min(times)


def machine(device: torch.device) -> str:
    """The device in words, for a benchmark's footer: the GPU's name, or the CPU and the number
    of torch threads."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"{platform.processor() or platform.machine()}, {torch.get_num_threads()} torch thread(s)"
