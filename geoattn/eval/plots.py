"""Figures of a cross-mesh report and of one prediction on its mesh (matplotlib, no display).

matplotlib (the ``plot`` extra) is imported when a figure is drawn, so :mod:`geoattn.eval`
imports without it.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from ..errors import DimensionError
from ..optional import require
from .crossmesh import CrossMeshReport, SplitReport


def _pyplot():
    matplotlib = require("matplotlib", "plot", "figures")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def errors_figure(report: CrossMeshReport):
    """The figure of :func:`plot_errors` (a :class:`matplotlib.figure.Figure`, not yet saved)."""
    plt = _pyplot()
    meshes, models = list(report.nodes), list(report.errors)
    fig, ax = plt.subplots(figsize=(1.3 * len(meshes) + 2, 3.5))
    width = 0.8 / len(models)
    top = 0.0
    for k, m in enumerate(models):
        means = [report.mean(m, mesh) for mesh in meshes]
        bars = ax.bar(np.arange(len(meshes)) + k * width, means, width, label=m)
        ax.bar_label(bars, fmt="%.3g", fontsize=7)
        top = max(top, *means)
    ax.set_xticks(np.arange(len(meshes)) + 0.4 - width / 2,
                  [f"{mesh}\n({report.nodes[mesh]})" for mesh in meshes], fontsize=8)
    ax.set_ylabel("relative L2 error")
    ax.set_ylim(0, 1.15 * top if top > 0 else 1.0)  # linear from zero: bar heights compare honestly
    ax.legend()
    fig.tight_layout()
    return fig


def plot_errors(report: CrossMeshReport, path: str | Path) -> None:
    """Bar chart of the mean relative :math:`L^2` error per mesh, one bar group per model, on a
    linear axis from zero (so that the bars' heights are in the ratio of the errors), each bar
    labelled with its value."""
    plt = _pyplot()
    fig = errors_figure(report)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def split_figure(report: SplitReport, model: str | None = None, label: int = 3):
    """The figure of :func:`plot_split` (a :class:`matplotlib.figure.Figure`, not yet saved)."""
    plt = _pyplot()
    model = model or next(iter(report.errors))
    fig, ax = plt.subplots(figsize=(6.5, 3.8))
    for name in report.samples:
        errors = report.errors[model][name].cpu().numpy()
        ax.scatter(report.sizes[name], errors, s=18, label=f"{name} (mean {errors.mean():.3g})")
    for name, sample, n, err in report.rows(model)[:label]:  # the worst files named
        ax.annotate(SplitReport.key(sample), (n, err), fontsize=7, xytext=(3, 3), textcoords="offset points")
    ax.set_xlabel("nodes of the sample's mesh")
    ax.set_ylabel("relative L2 error")
    ax.set_ylim(bottom=0)
    ax.set_title(f"{model}: error of every file, by set")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def plot_split(report: SplitReport, path: str | Path, model: str | None = None) -> None:
    """The relative :math:`L^2` error of every sample (file) against its node count, one colour
    per set, the worst files named; linear axis from zero."""
    plt = _pyplot()
    fig = split_figure(report, model)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _triangles(cells: torch.Tensor) -> np.ndarray:
    cells = cells.cpu().numpy()
    if cells.shape[1] == 4:  # quads -> two triangles each
        cells = np.concatenate([cells[:, [0, 1, 2]], cells[:, [0, 2, 3]]])
    return cells


def sample_figure(data, prediction: torch.Tensor, title: str = ""):
    """The figure of :func:`plot_sample` (a :class:`matplotlib.figure.Figure`, not yet saved)."""
    plt = _pyplot()
    import matplotlib.tri as mtri

    if data.pos.shape[1] != 2 or getattr(data, "cells", None) is None or data.cells.shape[1] not in (3, 4):
        raise DimensionError(
            f"plot_sample draws functions on 2-D triangle or quad meshes; this sample has "
            f"{data.pos.shape[1]}-D nodes{'' if getattr(data, 'cells', None) is not None else ' and no cells'}: "
            "write it with geoattn.mesh.write_mesh and open the .vtu in ParaView instead")
    pos = data.pos.detach().cpu().numpy()
    tri = mtri.Triangulation(pos[:, 0], pos[:, 1], _triangles(data.cells))
    values = {"input": data.x[:, 0], "truth": data.y[:, 0], "prediction": prediction[:, 0],
              "error": prediction[:, 0] - data.y[:, 0]}
    values = {k: v.detach().cpu().double().numpy() for k, v in values.items()}
    shared = (min(values["truth"].min(), values["prediction"].min()),
              max(values["truth"].max(), values["prediction"].max()))
    bound = float(np.abs(values["error"]).max()) or 1.0
    limits = {"input": (values["input"].min(), values["input"].max()), "truth": shared,
              "prediction": shared, "error": (-bound, bound)}  # the error centred on zero
    fig, axes = plt.subplots(1, 4, figsize=(14, 3.4), layout="constrained")
    for ax, (name, v) in zip(axes, values.items()):
        art = ax.tripcolor(tri, v, shading="gouraud", vmin=limits[name][0], vmax=limits[name][1],
                           cmap="RdBu_r" if name == "error" else "viridis")
        ax.triplot(tri, lw=0.15, color="k", alpha=0.3)
        ax.set_title(name)
        ax.set_aspect("equal")
        ax.set_xticks([])
        ax.set_yticks([])
        if name != "truth":  # truth and prediction share the prediction's colour bar
            fig.colorbar(art, ax=list(axes[1:3]) if name == "prediction" else ax, shrink=0.8)
    if title:
        fig.suptitle(title)
    return fig


def plot_sample(data, prediction: torch.Tensor, path: str | Path, title: str = "") -> None:
    """Input, truth, prediction and pointwise error of one sample on its 2-D mesh (tripcolor).

    Truth and prediction are drawn on one colour scale (the range of both, one colour bar), so
    that equal colours mean equal values; the input has its own scale, and the error
    (prediction minus truth) its own, symmetric about zero.

    Raises:
        DimensionError: the sample is not on a 2-D triangle or quad mesh.
    """
    plt = _pyplot()
    fig = sample_figure(data, prediction, title)
    fig.savefig(path, dpi=110)
    plt.close(fig)
