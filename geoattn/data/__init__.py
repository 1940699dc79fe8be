"""Data: Gaussian random fields as functions, Darcy flow on any mesh, dataset files.

:mod:`~geoattn.data.grf` draws fields that can be evaluated anywhere, :mod:`~geoattn.data.darcy`
solves Darcy flow with P1 finite elements, :mod:`~geoattn.data.dataset` writes and lazily
reads multi-mesh dataset files, and :mod:`~geoattn.data.odes` solves Lorenz-63 and a controlled
ODE as functions of time (the papers' time-series experiments).
"""

from .darcy import (DarcyProblem, Lognormal, PiecewiseConstant, darcy_samples, solve_darcy,
                    solve_darcy_many)
from .dataset import DarcyDataset
from .generate import generate_darcy
from .odes import (ControlledODE, Lorenz63, nonuniform_grid, ode_samples, operator_data,
                   time_weights, uniform_grid)
from .grf import PRESETS, GaussianRandomField, GRFSample, preset
from .recipe import Recipe, load_recipe

__all__ = [
    "ControlledODE",
    "DarcyDataset",
    "DarcyProblem",
    "GRFSample",
    "GaussianRandomField",
    "Lognormal",
    "Lorenz63",
    "PRESETS",
    "PiecewiseConstant",
    "Recipe",
    "darcy_samples",
    "generate_darcy",
    "load_recipe",
    "nonuniform_grid",
    "ode_samples",
    "operator_data",
    "preset",
    "solve_darcy",
    "solve_darcy_many",
    "time_weights",
    "uniform_grid",
]
