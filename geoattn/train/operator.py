"""Former home of :class:`~geoattn.operators.NormalizedOperator` (re-exported)."""

from ..operators.normalized import NormalizedOperator

__all__ = ["NormalizedOperator"]
