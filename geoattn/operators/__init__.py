"""Operators that stand in for a model: normalised, refined, on a latent mesh, symmetrized, ensembles.

Each is called as the models are, ``op(x, mesh, *, query=None)`` with a
:class:`~geoattn.mesh.Mesh` (the former ``op(x, pos, weight, batch)`` through
:mod:`geoattn.compat`, with a warning), calls the operator it wraps the same way, and takes its per-mesh structure from the mesh (its memo), so the
wrappers compose in any order and nothing is registered beforehand.
"""

from .ensemble import Ensemble
from .latent import LatentMeshOperator
from .normalized import NormalizedOperator
from .normalizer import GaussianNormalizer
from ..compat import moved
from .refined import RefinedOperator, training_size
from .symmetrized import SymmetrizedOperator, symmetrize
from .wrapper import MeshOperator, WrappedOperator

__getattr__ = moved(__name__, {"ResolvedQuadrature": "geoattn.operators:RefinedOperator"})

__all__ = ["Ensemble", "GaussianNormalizer", "LatentMeshOperator", "MeshOperator", "NormalizedOperator",
           "RefinedOperator", "SymmetrizedOperator", "WrappedOperator", "symmetrize", "training_size"]
