"""Input functions of the model tests (a plain module: ``conftest`` names clash across folders)."""

import torch


def smooth_input(pos):
    """A smooth two-channel input function of the coordinates."""
    return torch.stack([torch.sin(2 * pos[:, 0]) * torch.cos(pos[:, 1]), pos[:, 0] * pos[:, 1]], 1)
