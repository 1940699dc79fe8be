"""Data: Gaussian random fields as functions, Darcy flow on any mesh, dataset files.

:mod:`~geoattn.data.grf` draws fields that can be evaluated anywhere, :mod:`~geoattn.data.darcy`
solves Darcy flow with P1 finite elements, and :mod:`~geoattn.data.dataset` writes and lazily
reads multi-mesh dataset files. The generators of the papers' other experiments (ODEs, Burgers,
the inverse problem, Kolmogorov flow, the continuum attention paper's Darcy flow, the conditional
sampler of the Bayes floors) are not part of the library: they live with the benchmarks, in
``benchmarks/problems/``.
"""

from .darcy import (DarcyProblem, Lognormal, PiecewiseConstant, darcy_samples, solve_darcy,
                    solve_darcy_many)
from .dataset import DarcyDataset
from .generate import generate_darcy
from .meshdataset import MeshDataset, dataset_version, write_mesh_dataset
from .grf import PRESETS, GaussianRandomField, GRFSample, preset
from .recipe import Recipe, load_recipe
from .refined import refined_samples

__all__ = [
    "DarcyDataset",
    "DarcyProblem",
    "GRFSample",
    "GaussianRandomField",
    "Lognormal",
    "MeshDataset",
    "PRESETS",
    "PiecewiseConstant",
    "Recipe",
    "darcy_samples",
    "refined_samples",
    "dataset_version",
    "generate_darcy",
    "load_recipe",
    "preset",
    "solve_darcy",
    "solve_darcy_many",
    "write_mesh_dataset",
]
