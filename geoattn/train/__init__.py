"""Training: weighted losses, checkpoints, and the training loop.

The operators that stand in for a model (:class:`NormalizedOperator`, :class:`RefinedOperator`,
:class:`LatentMeshOperator`, :class:`SymmetrizedOperator`, :class:`Ensemble`) live in
:mod:`geoattn.operators` and are re-exported here.
"""

from ..compat import moved
from ..operators import (Ensemble, GaussianNormalizer, LatentMeshOperator, NormalizedOperator, RefinedOperator,
                         SymmetrizedOperator, symmetrize, training_size)
from .between_nodes import NodeSplit, between_nodes_loss, refined_for_loss, split_refined
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
    "NodeSplit",
    "NormalizedOperator",
    "RefinedOperator",
    "SymmetrizedOperator",
    "Trainer",
    "between_nodes_loss",
    "evaluate_errors",
    "init_distributed",
    "load_ensemble",
    "load_checkpoint",
    "load_operator",
    "load_trained",
    "operator_payload",
    "refined_for_loss",
    "relative_h1",
    "relative_l2",
    "sample_errors",
    "symmetrize",
    "save_checkpoint",
    "split_refined",
    "train_ensemble",
    "training_size",
]
