"""Training: weighted losses and normalisers, checkpoints, and the training loop."""

from .checkpoint import load_checkpoint, load_operator, operator_payload, save_checkpoint
from .distributed import init_distributed
from .kernel_layer import KernelLayerFit, fit_kernel_layer, kernel_layer_objective
from .loss import p1_gradients, relative_h1, relative_l2
from .normalizer import GaussianNormalizer
from .operator import NormalizedOperator, node_average_weights
from .trainer import Trainer, evaluate_errors, sample_errors

__all__ = [
    "GaussianNormalizer",
    "KernelLayerFit",
    "NormalizedOperator",
    "Trainer",
    "evaluate_errors",
    "fit_kernel_layer",
    "init_distributed",
    "kernel_layer_objective",
    "load_checkpoint",
    "load_operator",
    "node_average_weights",
    "operator_payload",
    "p1_gradients",
    "relative_h1",
    "relative_l2",
    "sample_errors",
    "save_checkpoint",
]
