"""Data: Gaussian random fields as functions, Darcy flow on any mesh, dataset files.

:mod:`~geoattn.data.grf` draws fields that can be evaluated anywhere (and
:mod:`~geoattn.data.conditional` draws them given what a mesh sees of one), :mod:`~geoattn.data.darcy`
solves Darcy flow with P1 finite elements, :mod:`~geoattn.data.dataset` writes and lazily
reads multi-mesh dataset files, and the papers' other experiments have their generators:
:mod:`~geoattn.data.odes` (Lorenz-63 and a controlled ODE as functions of time),
:mod:`~geoattn.data.burgers` (viscous Burgers on the periodic interval),
:mod:`~geoattn.data.inverse` (noisy Darcy solutions to coefficients on another mesh),
:mod:`~geoattn.data.navier_stokes` (Kolmogorov flow on the torus) and
:mod:`~geoattn.data.calvello` (Darcy flow with the continuum attention paper's field).
"""

from .burgers import (BurgersData, FourierSeries, PeriodicGaussianRandomField, burgers_data,
                      cole_hopf, nonuniform_samples, on_circle, periodic_trapezoid_weights,
                      solve_burgers, uniform_samples)
from .calvello import calvello_coefficient, calvello_darcy, calvello_field
from .conditional import SignConditionedField, ValueConditionedField
from .darcy import (DarcyProblem, Lognormal, PiecewiseConstant, darcy_samples, solve_darcy,
                    solve_darcy_many)
from .dataset import DarcyDataset
from .generate import generate_darcy
from .meshdataset import MeshDataset, dataset_version, write_mesh_dataset
from .inverse import InverseProblem, add_noise, hat_average, node_variance
from .navier_stokes import (KolmogorovSolver, PeriodicGaussianField, PeriodicSample, grid_values,
                            kolmogorov_pairs, pair_samples, periodic_voronoi_weights,
                            scattered_points, torus_grid)
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
    "KolmogorovSolver",
    "Lognormal",
    "Lorenz63",
    "MeshDataset",
    "PRESETS",
    "PeriodicGaussianField",
    "PeriodicGaussianRandomField",
    "PeriodicSample",
    "PiecewiseConstant",
    "Recipe",
    "SignConditionedField",
    "ValueConditionedField",
    "add_noise",
    "burgers_data",
    "calvello_coefficient",
    "calvello_darcy",
    "calvello_field",
    "cole_hopf",
    "darcy_samples",
    "dataset_version",
    "generate_darcy",
    "grid_values",
    "hat_average",
    "kolmogorov_pairs",
    "load_recipe",
    "node_variance",
    "nonuniform_grid",
    "nonuniform_samples",
    "ode_samples",
    "on_circle",
    "operator_data",
    "pair_samples",
    "periodic_trapezoid_weights",
    "periodic_voronoi_weights",
    "preset",
    "scattered_points",
    "solve_burgers",
    "solve_darcy",
    "solve_darcy_many",
    "time_weights",
    "torus_grid",
    "uniform_grid",
    "uniform_samples",
    "write_mesh_dataset",
]
