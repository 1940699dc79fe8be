"""Former home of :class:`~geoattn.operators.WrappedOperator` (re-exported)."""

from ..operators.wrapper import WrappedOperator

__all__ = ["WrappedOperator"]
