"""Data: Gaussian random fields as functions, Darcy flow on any mesh, dataset files.

:mod:`~geoattn.data.grf` draws fields that can be evaluated anywhere, :mod:`~geoattn.data.darcy`
solves Darcy flow with P1 finite elements, and :mod:`~geoattn.data.dataset` writes and lazily
reads multi-mesh dataset files.
"""

from .darcy import (DarcyProblem, Lognormal, PiecewiseConstant, darcy_samples, solve_darcy,
                    solve_darcy_many)
from .dataset import DarcyDataset
from .generate import generate_darcy
from .grf import PRESETS, GaussianRandomField, GRFSample, preset
from .recipe import Recipe, load_recipe

__all__ = [
    "DarcyDataset",
    "DarcyProblem",
    "GRFSample",
    "GaussianRandomField",
    "Lognormal",
    "PRESETS",
    "PiecewiseConstant",
    "Recipe",
    "darcy_samples",
    "generate_darcy",
    "load_recipe",
    "preset",
    "solve_darcy",
    "solve_darcy_many",
]
