"""Training: weighted losses and normalisers, checkpoints, and the training loop."""

from .checkpoint import load_checkpoint, load_operator, operator_payload, save_checkpoint
from .distributed import init_distributed
from .ensemble import Ensemble, load_ensemble, load_trained, train_ensemble
from .loss import relative_h1, relative_l2
from .normalizer import GaussianNormalizer
from .operator import NormalizedOperator
from ..mesh.registry import register_meshes
from .resolved import ResolvedQuadrature, training_size
from .symmetrized import SymmetrizedOperator, symmetrize
from .trainer import Trainer, evaluate_errors, sample_errors

__all__ = [
    "Ensemble",
    "GaussianNormalizer",
    "NormalizedOperator",
    "ResolvedQuadrature",
    "SymmetrizedOperator",
    "Trainer",
    "evaluate_errors",
    "init_distributed",
    "load_ensemble",
    "load_checkpoint",
    "load_operator",
    "load_trained",
    "operator_payload",
    "register_meshes",
    "relative_h1",
    "relative_l2",
    "sample_errors",
    "symmetrize",
    "save_checkpoint",
    "train_ensemble",
    "training_size",
]
