"""Former home of :class:`~geoattn.operators.NormalizedOperator` (now in :mod:`geoattn.operators`); its
names are served with a :class:`DeprecationWarning` (:func:`geoattn.compat.moved`)."""

from ..compat import moved

__getattr__ = moved(__name__, {
    "NormalizedOperator": "geoattn.operators:NormalizedOperator",
})
