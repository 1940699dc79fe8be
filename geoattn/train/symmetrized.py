"""Former home of :class:`~geoattn.operators.SymmetrizedOperator` (re-exported)."""

from ..operators.symmetrized import SymmetrizedOperator, symmetrize

__all__ = ["SymmetrizedOperator", "symmetrize"]
