"""The problem generators of the benchmarks: data and exact solvers of the papers' experiments.

Not part of geoattn's API (nothing in the installed package imports them, and they may change with
the benchmarks). The scripts of ``benchmarks/`` run with that folder on ``sys.path`` and import
them as ``from problems.burgers import ...``:

- :mod:`problems.odes`: Lorenz-63 and a controlled ODE as functions of time (``lorenz_cde.py``);
- :mod:`problems.burgers`: viscous Burgers on the periodic interval (``galerkin_experiments.py``);
- :mod:`problems.inverse`: noisy Darcy solutions to coefficients on another mesh
  (``galerkin_experiments.py``);
- :mod:`problems.navier_stokes`: Kolmogorov flow on the torus (``kolmogorov.py``);
- :mod:`problems.calvello`: Darcy flow with the continuum attention paper's field
  (``darcy_calvello.py``);
- :mod:`problems.conditional`: exact samplers of Gaussian random fields given what a mesh sees of
  one, for the Bayes floors (``darcy_floor.py``).
"""
