"""Data: Gaussian random fields as functions, Darcy flow on any mesh, dataset files.

:mod:`~geoattn.data.grf` draws fields that can be evaluated anywhere, :mod:`~geoattn.data.darcy`
solves Darcy flow with P1 finite elements, :mod:`~geoattn.data.dataset` writes and lazily
reads multi-mesh dataset files, and the papers' other experiments have their generators:
:mod:`~geoattn.data.odes` (Lorenz-63 and a controlled ODE as functions of time),
:mod:`~geoattn.data.burgers` (viscous Burgers on the periodic interval) and
:mod:`~geoattn.data.inverse` (noisy Darcy solutions to coefficients on another mesh).
"""

from .burgers import (BurgersData, FourierSeries, PeriodicGaussianRandomField, burgers_data,
                      cole_hopf, nonuniform_samples, on_circle, periodic_trapezoid_weights,
                      solve_burgers, uniform_samples)
from .darcy import (DarcyProblem, Lognormal, PiecewiseConstant, darcy_samples, solve_darcy,
                    solve_darcy_many)
from .dataset import DarcyDataset
from .generate import generate_darcy
from .inverse import InverseProblem, add_noise, hat_average, node_variance
from .odes import (ControlledODE, Lorenz63, nonuniform_grid, ode_samples, operator_data,
                   time_weights, uniform_grid)
from .grf import PRESETS, GaussianRandomField, GRFSample, preset
from .recipe import Recipe, load_recipe

__all__ = [
    "BurgersData",
    "ControlledODE",
    "DarcyDataset",
    "DarcyProblem",
    "FourierSeries",
    "GRFSample",
    "GaussianRandomField",
    "InverseProblem",
    "Lognormal",
    "Lorenz63",
    "PRESETS",
    "PeriodicGaussianRandomField",
    "PiecewiseConstant",
    "Recipe",
    "add_noise",
    "burgers_data",
    "cole_hopf",
    "darcy_samples",
    "generate_darcy",
    "hat_average",
    "load_recipe",
    "node_variance",
    "nonuniform_grid",
    "nonuniform_samples",
    "ode_samples",
    "on_circle",
    "operator_data",
    "periodic_trapezoid_weights",
    "preset",
    "solve_burgers",
    "solve_darcy",
    "solve_darcy_many",
    "time_weights",
    "uniform_grid",
    "uniform_samples",
]
