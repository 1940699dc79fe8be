"""Process-group set-up for multi-process training launched by ``torchrun``."""

from __future__ import annotations

import atexit
import os

import torch
import torch.distributed as dist


def init_distributed(device: str | torch.device | None = None) -> bool:
    """Join the process group ``torchrun`` describes in the environment (``WORLD_SIZE`` > 1).

    The backend follows the device the model will train on: NCCL for a CUDA device (made this
    process's current device), gloo for the CPU. With ``device=None`` that device is
    ``cuda:LOCAL_RANK`` when CUDA is available and the CPU otherwise; give the device (as
    :func:`~geoattn.train.trainer.resolve_device` returns it) to train on the CPU of a machine
    with GPUs. Returns whether training is distributed; a single process (no ``torchrun``)
    returns ``False``. A group joined here is left again when the interpreter exits.
    """
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return False
    if not dist.is_initialized():
        if device is None:
            device = f"cuda:{os.environ.get('LOCAL_RANK', '0')}" if torch.cuda.is_available() else "cpu"
        device = torch.device(device)
        backend = "nccl" if device.type == "cuda" else "gloo"
        if backend == "nccl":
            torch.cuda.set_device(device)
        dist.init_process_group(backend)
        # Leave the group before the interpreter tears down: a gloo group destroyed by garbage
        # collection at exit can abort the process ("terminate called without an active
        # exception") after training has finished.
        atexit.register(_leave)
    return True


def _leave() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()
