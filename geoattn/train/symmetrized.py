"""Former home of :class:`~geoattn.operators.SymmetrizedOperator` (now in :mod:`geoattn.operators`); its
names are served with a :class:`DeprecationWarning` (:func:`geoattn.compat.moved`)."""

from ..compat import moved

__getattr__ = moved(__name__, {
    "SymmetrizedOperator": "geoattn.operators:SymmetrizedOperator",
    "symmetrize": "geoattn.operators:symmetrize",
})
