"""Figures of a cross-mesh report and of one prediction on its mesh (matplotlib, no display).

matplotlib (the ``plot`` extra) is imported when a figure is drawn, so :mod:`geoattn.eval`
imports without it.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from ..optional import require
from .crossmesh import CrossMeshReport


def _pyplot():
    matplotlib = require("matplotlib", "plot", "figures")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_errors(report: CrossMeshReport, path: str | Path) -> None:
    """Bar chart of the mean relative :math:`L^2` error per mesh, one bar group per model."""
    plt = _pyplot()
    meshes, models = list(report.nodes), list(report.errors)
    fig, ax = plt.subplots(figsize=(1.3 * len(meshes) + 2, 3.5))
    width = 0.8 / len(models)
    for k, m in enumerate(models):
        ax.bar(np.arange(len(meshes)) + k * width, [report.mean(m, mesh) for mesh in meshes],
               width, label=m)
    ax.set_xticks(np.arange(len(meshes)) + 0.4 - width / 2,
                  [f"{mesh}\n({report.nodes[mesh]})" for mesh in meshes], fontsize=8)
    ax.set_ylabel("relative L2 error")
    ax.set_yscale("log")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _triangles(cells: torch.Tensor) -> np.ndarray:
    cells = cells.cpu().numpy()
    if cells.shape[1] == 4:  # quads -> two triangles each
        cells = np.concatenate([cells[:, [0, 1, 2]], cells[:, [0, 2, 3]]])
    return cells


def plot_sample(data, prediction: torch.Tensor, path: str | Path, title: str = "") -> None:
    """Input, truth, prediction and pointwise error of one sample on its 2-D mesh (tripcolor)."""
    plt = _pyplot()
    import matplotlib.tri as mtri

    pos = data.pos.detach().cpu().numpy()
    tri = mtri.Triangulation(pos[:, 0], pos[:, 1], _triangles(data.cells))
    fields = {"input": data.x[:, 0], "truth": data.y[:, 0], "prediction": prediction[:, 0],
              "error": prediction[:, 0] - data.y[:, 0]}
    fig, axes = plt.subplots(1, 4, figsize=(14, 3.4))
    for ax, (name, values) in zip(axes, fields.items()):
        art = ax.tripcolor(tri, values.detach().cpu().numpy(), shading="gouraud",
                           cmap="RdBu_r" if name == "error" else "viridis")
        ax.triplot(tri, lw=0.15, color="k", alpha=0.3)
        ax.set_title(name)
        ax.set_aspect("equal")
        ax.set_xticks([])
        ax.set_yticks([])
        fig.colorbar(art, ax=ax, shrink=0.8)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
