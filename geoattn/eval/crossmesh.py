"""Cross-mesh (discretisation-invariance) report: one model scored on many meshes of the same samples."""

from __future__ import annotations

import csv
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch

from ..mesh.samples import as_samples, mesh_id_of
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
    weights the model itself uses, so weighted and node-average models compare on one scale. Every
    operator is called with the samples' :class:`~geoattn.mesh.Mesh` objects, one per mesh
    (:func:`~geoattn.mesh.as_samples`), shared by all operators, so structure built on a mesh (a
    refinement, a graph) is built once for the report, and kept with the datasets when they are
    datasets or :class:`~geoattn.mesh.MeshSamples`.

    Args:
        operators: trained models by display name (e.g. ``{"weighted": op, "unweighted": ab}``).
        datasets: samples by mesh name, the same samples (as many) on every mesh; the first is the
            reference unless ``reference`` is given.
        reference: the training mesh name (default: the first dataset).
        batch_size: samples per forward pass (default ``4``).

    Raises:
        ValueError: no datasets, an unknown reference, or meshes holding different numbers of
            samples (their errors would not compare).
    """
    if not datasets:
        raise ValueError("no datasets to evaluate")
    reference = reference or next(iter(datasets))
    if reference not in datasets:
        raise ValueError(f"reference mesh {reference!r} is not among {list(datasets)}")
    counts = {mesh: len(samples) for mesh, samples in datasets.items()}
    if len(set(counts.values())) > 1:
        listed = ", ".join(f"{mesh!r} {n}" for mesh, n in counts.items())
        raise ValueError(f"a cross-mesh report compares the same samples on every mesh, but the meshes "
                         f"hold different numbers of samples ({listed}); give every mesh the same samples "
                         "(e.g. the first N of each), or score sets of different samples with split_report")
    if not all(counts.values()):
        raise ValueError(f"no samples to evaluate on mesh {next(m for m, n in counts.items() if not n)!r}")
    datasets = {name: as_samples(samples) for name, samples in datasets.items()}
    report = CrossMeshReport({k: v.meshes[mesh_id_of(v, 0)].num_nodes for k, v in datasets.items()}, reference)
    report.errors = _score(operators, datasets, batch_size)
    return report


@dataclass
class SplitReport:
    """Per-sample relative :math:`L^2(D)` errors of one or more models on named sets of samples
    (a dataset's test sets: different samples, on meshes that may differ per sample).

    ``errors[model][name]`` is a tensor ``[S]``; ``nodes[name]`` the fewest and most nodes of a
    sample of the set; ``samples[name]`` the name of each sample (its file) and ``sizes[name]``
    its node count, when known. Ratios to the first set are given only for sets that hold the
    same samples as it (the same names, matched by name, not by count), the same samples on
    other meshes: :meth:`ratio` pairs them by name.
    """

    nodes: dict[str, tuple[int, int]]
    errors: dict[str, dict[str, torch.Tensor]] = field(default_factory=dict)
    samples: dict[str, list[str]] = field(default_factory=dict)
    sizes: dict[str, list[int]] = field(default_factory=dict)

    @staticmethod
    def key(sample: str) -> str:
        """What pairs samples across sets: the file name without its folders."""
        return sample.replace("\\", "/").rsplit("/", 1)[-1]

    def paired(self, name: str, reference: str | None = None) -> bool:
        """Whether set ``name`` holds the same samples as ``reference`` (default: the first set)."""
        reference = reference or next(iter(self.nodes))
        if name not in self.samples or reference not in self.samples:
            return False
        mine, theirs = [self.key(s) for s in self.samples[name]], [self.key(s) for s in self.samples[reference]]
        return len(set(mine)) == len(mine) and sorted(mine) == sorted(theirs)

    def ratio(self, model: str, name: str, reference: str | None = None) -> float | None:
        """Mean error on ``name`` over mean error on ``reference`` (default: the first set), the
        samples paired by name; ``None`` when the sets hold different samples."""
        reference = reference or next(iter(self.nodes))
        if not self.paired(name, reference):
            return None
        order = {self.key(s): i for i, s in enumerate(self.samples[reference])}
        index = torch.tensor([order[self.key(s)] for s in self.samples[name]])
        ref = self.errors[model][reference][index]
        return float(self.errors[model][name].mean() / ref.mean())

    def rows(self, model: str | None = None) -> list[tuple[str, str, int, float]]:
        """``(set, sample, nodes, error)`` of every sample, worst first."""
        model = model or next(iter(self.errors))
        out = [(name, sample, n, float(e))
               for name, names in self.samples.items()
               for sample, n, e in zip(names, self.sizes[name], self.errors[model][name])]
        return sorted(out, key=lambda row: -row[3])

    def files_table(self, model: str | None = None, top: int | None = 10) -> str:
        """A plain-text table of the samples (files), worst first (the first ``top``; ``None``: all)."""
        rows = self.rows(model)
        shown = rows if top is None else rows[:top]
        width = max([len("file")] + [len(r[1]) for r in shown]) + 2
        head = f"{'set':<12}{'file':<{width}}{'nodes':>7}{'rel L2':>10}"
        lines = [head, "-" * len(head)]
        lines += [f"{name:<12}{sample:<{width}}{n:>7}{err:>10.4f}" for name, sample, n, err in shown]
        if len(shown) < len(rows):
            lines.append(f"... {len(rows) - len(shown)} more")
        return "\n".join(lines)

    def write_files_csv(self, path: str | Path) -> None:
        """Write ``model, set, file, nodes, error`` rows, worst first per model."""
        with open(path, "w", newline="") as fh:
            writer = csv.writer(fh)
            writer.writerow(["model", "set", "file", "nodes", "error"])
            for m in self.errors:
                for name, sample, n, err in self.rows(m):
                    writer.writerow([m, name, sample, n, f"{err:.6g}"])

    def mean(self, model: str, name: str) -> float:
        """Mean relative error of ``model`` on set ``name``."""
        return float(self.errors[model][name].mean())

    def table(self) -> str:
        """A plain-text table: one row per set, its size, node counts, and each model's mean error."""
        models = list(self.errors)
        widths = [max(22, len(m) + 9) for m in models]
        paired = any(self.paired(name) for name in list(self.nodes)[1:])
        head = f"{'set':<18}{'samples':>8}{'nodes':>14}"
        head += "".join(f"{m + ' rel L2':>{w}}" + ("   ratio" if paired else "") for m, w in zip(models, widths))
        lines = [head, "-" * len(head)]
        for name, (low, high) in self.nodes.items():
            count = len(next(iter(self.errors.values()))[name]) if self.errors else 0
            span = f"{low}" if low == high else f"{low}-{high}"
            row = f"{name:<18}{count:>8}{span:>14}"
            for m, w in zip(models, widths):
                row += f"{self.mean(m, name):>{w}.4f}"
                if paired:
                    ratio = self.ratio(m, name)
                    row += f"{ratio:>8.2f}" if ratio is not None else f"{'-':>8}"
            lines.append(row)
        return "\n".join(lines)

    def write_csv(self, path: str | Path) -> None:
        """Write ``model, set, samples, min_nodes, max_nodes, mean, median, max`` rows."""
        with open(path, "w", newline="") as fh:
            writer = csv.writer(fh)
            writer.writerow(["model", "set", "samples", "min_nodes", "max_nodes", "mean", "median", "max",
                             "paired_ratio"])
            for m, per_set in self.errors.items():
                for name, e in per_set.items():
                    ratio = self.ratio(m, name)
                    writer.writerow([m, name, len(e), *self.nodes[name], f"{float(e.mean()):.6g}",
                                     f"{float(e.median()):.6g}", f"{float(e.max()):.6g}",
                                     "" if ratio is None else f"{ratio:.4f}"])


def split_report(operators: Mapping[str, torch.nn.Module], sets: Mapping[str, Sequence],
                 batch_size: int = 4, names: Mapping[str, Sequence[str]] | None = None) -> SplitReport:
    """Score each operator on every named set of samples (:class:`SplitReport`), with the
    weighted relative :math:`L^2(D)` error of :func:`cross_mesh_report`; ``names`` gives each
    set's sample (file) names, for the per-file table and the ratios of paired sets (default:
    ``set[i]``).

    Raises:
        ValueError: no sets, an empty set, or non-finite errors.
    """
    if not sets:
        raise ValueError("no sample sets to evaluate")
    empty = [name for name, samples in sets.items() if not len(samples)]
    if empty:
        raise ValueError(f"sample set {empty[0]!r} is empty")
    sets = {name: as_samples(samples) for name, samples in sets.items()}
    sizes = {name: [samples.meshes[mesh_id_of(samples, i)].num_nodes for i in range(len(samples))]
             for name, samples in sets.items()}
    report = SplitReport({name: (min(n), max(n)) for name, n in sizes.items()}, sizes=sizes)
    report.samples = {name: list(names[name]) if names is not None and name in names
                      else [f"{name}[{i}]" for i in range(len(samples))] for name, samples in sets.items()}
    report.errors = _score(operators, sets, batch_size)
    return report


def _score(operators: Mapping, sets: Mapping, batch_size: int) -> dict:
    """``{model: {set: per-sample errors}}`` of every operator on every set of samples (one
    :class:`~geoattn.mesh.Mesh` per mesh of a set, shared by the operators); non-finite errors
    are refused, naming the model."""
    sets = {name: as_samples(samples) for name, samples in sets.items()}
    errors = {}
    for model, op in operators.items():
        errors[model] = {name: evaluate_errors(op, samples, batch_size) for name, samples in sets.items()}
        if any(not math.isfinite(float(e.mean())) for e in errors[model].values()):
            raise ValueError(f"model {model!r} gives non-finite errors")
    return errors
