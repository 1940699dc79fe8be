"""Evaluation: cross-mesh reports, figures and ParaView files of predictions."""

from .crossmesh import CrossMeshReport, SplitReport, cross_mesh_report, split_report
from .plots import plot_errors, plot_sample
from .predict import predict_meshio
from ..operators.refined import RefinedOperator, ResolvedQuadrature, training_size

__all__ = ["CrossMeshReport", "RefinedOperator", "ResolvedQuadrature", "SplitReport", "cross_mesh_report", "plot_errors",
           "plot_sample", "predict_meshio", "split_report", "training_size"]
