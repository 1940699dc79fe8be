"""Evaluation: cross-mesh reports, figures and ParaView files of predictions."""

from .crossmesh import CrossMeshReport, SplitReport, cross_mesh_report, split_report
from .plots import plot_errors, plot_sample, plot_split
from .predict import predict_meshio
from ..compat import moved
from ..operators.refined import RefinedOperator, training_size

__getattr__ = moved(__name__, {"ResolvedQuadrature": "geoattn.operators:RefinedOperator"})

__all__ = ["CrossMeshReport", "RefinedOperator", "SplitReport", "cross_mesh_report", "plot_errors",
           "plot_sample", "plot_split", "predict_meshio", "split_report", "training_size"]
