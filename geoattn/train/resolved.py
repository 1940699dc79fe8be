"""Former home of :class:`~geoattn.operators.RefinedOperator` (now in :mod:`geoattn.operators`); its
names are served with a :class:`DeprecationWarning` (:func:`geoattn.compat.moved`)."""

from ..compat import moved

__getattr__ = moved(__name__, {
    "RefinedOperator": "geoattn.operators:RefinedOperator",
    "ResolvedQuadrature": "geoattn.operators:RefinedOperator",
    "training_size": "geoattn.operators:training_size",
})
