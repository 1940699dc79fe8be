"""Training: weighted losses, checkpoints, and the training loop.

The operators that stand in for a model (:class:`NormalizedOperator`, :class:`RefinedOperator`,
:class:`LatentMeshOperator`, :class:`SymmetrizedOperator`, :class:`Ensemble`) live in
:mod:`geoattn.operators` and are re-exported here.
"""

from ..compat import moved
from ..operators import (Ensemble, GaussianNormalizer, LatentMeshOperator, NormalizedOperator, RefinedOperator,
                         SymmetrizedOperator, symmetrize, training_size)
from .checkpoint import load_checkpoint, load_operator, operator_payload, save_checkpoint
from .distributed import init_distributed
from .ensemble import load_ensemble, load_trained, train_ensemble
from .loss import relative_h1, relative_l2
from .trainer import Trainer, evaluate_errors, sample_errors

__getattr__ = moved(__name__, {"ResolvedQuadrature": "geoattn.operators:RefinedOperator"})

__all__ = [
    "Ensemble",
    "GaussianNormalizer",
    "LatentMeshOperator",
    "NormalizedOperator",
    "RefinedOperator",
    "SymmetrizedOperator",
    "Trainer",
    "evaluate_errors",
    "init_distributed",
    "load_ensemble",
    "load_checkpoint",
    "load_operator",
    "load_trained",
    "operator_payload",
    "relative_h1",
    "relative_l2",
    "sample_errors",
    "symmetrize",
    "save_checkpoint",
    "train_ensemble",
    "training_size",
]
