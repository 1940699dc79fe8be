"""Former home of :class:`~geoattn.operators.RefinedOperator` (``ResolvedQuadrature``; re-exported)."""

from ..operators.refined import RefinedOperator, ResolvedQuadrature, training_size

__all__ = ["RefinedOperator", "ResolvedQuadrature", "training_size"]
