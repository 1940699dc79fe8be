"""Cross-mesh (discretisation-invariance) report: one model scored on many meshes of the same samples."""

from __future__ import annotations

import csv
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch

from ..mesh.registry import register_meshes
from ..train.trainer import evaluate_errors


@dataclass
class CrossMeshReport:
    """Per-sample relative :math:`L^2(D)` errors of one or more models on a list of meshes.

    ``errors[model][mesh]`` is a tensor ``[S]`` (one value per sample), ``nodes[mesh]`` the node
    count; ``reference`` names the training mesh, against which ratios are taken.
    """

    nodes: dict[str, int]
    reference: str
    errors: dict[str, dict[str, torch.Tensor]] = field(default_factory=dict)

    def mean(self, model: str, mesh: str) -> float:
        """Mean relative error of ``model`` on ``mesh``."""
        return float(self.errors[model][mesh].mean())

    def ratio(self, model: str, mesh: str) -> float:
        """Mean error on ``mesh`` over mean error on the reference mesh."""
        return self.mean(model, mesh) / self.mean(model, self.reference)

    def table(self) -> str:
        """A plain-text table: one row per mesh, error and ratio to the reference per model."""
        models = list(self.errors)
        widths = [max(22, len(m) + 9) for m in models]  # a long model name widens its column
        head = f"{'mesh':<18}{'nodes':>7}" + "".join(f"{m + ' rel L2':>{w}}{'ratio':>7}" for m, w in zip(models, widths))
        lines = [head, "-" * len(head)]
        for mesh, n in self.nodes.items():
            row = f"{mesh:<18}{n:>7}"
            for m, w in zip(models, widths):
                row += f"{self.mean(m, mesh):>{w}.4f}{self.ratio(m, mesh):>7.2f}"
            lines.append(row)
        return "\n".join(lines)

    def write_csv(self, path: str | Path) -> None:
        """Write ``model, mesh, nodes, mean, median, max, ratio`` rows."""
        with open(path, "w", newline="") as fh:
            writer = csv.writer(fh)
            writer.writerow(["model", "mesh", "nodes", "mean", "median", "max", "ratio"])
            for m, per_mesh in self.errors.items():
                for mesh, e in per_mesh.items():
                    writer.writerow([m, mesh, self.nodes[mesh], f"{float(e.mean()):.6g}",
                                     f"{float(e.median()):.6g}", f"{float(e.max()):.6g}",
                                     f"{self.ratio(m, mesh):.4f}"])


def cross_mesh_report(operators: Mapping[str, torch.nn.Module], datasets: Mapping[str, Sequence],
                      reference: str | None = None, batch_size: int = 4) -> CrossMeshReport:
    """Score each operator on every dataset (same samples, different meshes).

    The score is always the weighted relative :math:`L^2(D)` error of the prediction, whatever
    weights the model itself uses, so weighted and node-average models compare on one scale. A
    model trained through :class:`~geoattn.train.ResolvedQuadrature` gets the datasets' meshes
    registered (:func:`~geoattn.train.register_meshes`).

    Args:
        operators: trained models by display name (e.g. ``{"weighted": op, "unweighted": ab}``).
        datasets: samples by mesh name; the first is the reference unless ``reference`` is given.
        reference: the training mesh name (default: the first dataset).
        batch_size: samples per forward pass (default ``4``).
    """
    if not datasets:
        raise ValueError("no datasets to evaluate")
    reference = reference or next(iter(datasets))
    if reference not in datasets:
        raise ValueError(f"reference mesh {reference!r} is not among {list(datasets)}")
    report = CrossMeshReport({k: v[0].num_nodes for k, v in datasets.items()}, reference)
    for name, op in operators.items():
        for samples in datasets.values():  # a model trained through ResolvedQuadrature meets the meshes
            register_meshes(op, samples)
        report.errors[name] = {mesh: evaluate_errors(op, samples, batch_size)
                               for mesh, samples in datasets.items()}
        if any(not math.isfinite(float(e.mean())) for e in report.errors[name].values()):
            raise ValueError(f"model {name!r} gives non-finite errors")
    return report
