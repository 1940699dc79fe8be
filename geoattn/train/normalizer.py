"""Former home of :class:`~geoattn.operators.normalizer.GaussianNormalizer` (re-exported)."""

from ..operators.normalizer import GaussianNormalizer

__all__ = ["GaussianNormalizer"]
