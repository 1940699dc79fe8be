"""Process-group set-up for multi-process training launched by ``torchrun``."""

from __future__ import annotations

import os

import torch
import torch.distributed as dist


def init_distributed() -> bool:
    """Join the process group ``torchrun`` describes in the environment (``WORLD_SIZE`` > 1).

    Uses NCCL when CUDA is available (one device per local rank) and gloo otherwise. Returns
    whether training is distributed; a single process (no ``torchrun``) returns ``False``.
    """
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return False
    if not dist.is_initialized():
        backend = "nccl" if torch.cuda.is_available() else "gloo"
        if backend == "nccl":
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        dist.init_process_group(backend)
    return True
