"""The base of the operators that stand in for a model: the call contract
``op(x, mesh, *, query=None)`` (:class:`MeshOperator`), and :class:`WrappedOperator`, an operator
around another that exposes the wrapped model's contract (channels, dimension, input checks)."""

from __future__ import annotations

import torch

from ..mesh.mesh import Mesh


class MeshOperator(torch.nn.Module):
    """A module called as ``op(x, mesh, *, query=None)`` (``mesh`` a :class:`~geoattn.mesh.Mesh`).
    The former call ``op(x, pos, weight, batch=None)`` still works for one minor version, with a
    :class:`DeprecationWarning` (:func:`geoattn.compat.legacy_call`)."""

    def __call__(self, x: torch.Tensor, mesh: Mesh | None = None, *args, **kwargs) -> torch.Tensor:
        if isinstance(mesh, Mesh) and not args and set(kwargs) <= {"query"}:
            return super().__call__(x, mesh, query=kwargs.get("query"))
        from ..models.base import refuse_pyg_data

        refuse_pyg_data(self, x, mesh)
        from ..compat import legacy_call

        return legacy_call(self, x, mesh, *args, **kwargs)


def fit_model_mesh(model: torch.nn.Module, mesh: Mesh) -> None:
    """``model.fit_mesh(mesh)``; nothing for a model without ``fit_mesh``."""
    fit = getattr(model, "fit_mesh", None)
    if fit is not None:
        fit(mesh)


class WrappedOperator(MeshOperator):
    """An operator around ``self.op``: ``in_channels``, ``out_channels``, ``dim`` and
    :meth:`check_inputs` are those of the wrapped model (a
    :class:`~geoattn.operators.NormalizedOperator`'s model, or the operator itself), and
    :meth:`fit_mesh` passes the training mesh on."""

    op: torch.nn.Module

    @property
    def _model(self) -> torch.nn.Module:
        return getattr(self.op, "model", self.op)  # a NormalizedOperator's model, or the model

    @property
    def in_channels(self) -> int:
        return self._model.in_channels

    @property
    def out_channels(self) -> int:
        return self._model.out_channels

    @property
    def dim(self) -> int:
        return self._model.dim

    def check_inputs(self, x: torch.Tensor, pos: torch.Tensor, weight: torch.Tensor | None = None) -> None:
        """The model's checks of the inputs (channels, dimension, dtype)."""
        self._model.check_inputs(x, pos, weight)

    def fit_mesh(self, mesh: Mesh) -> None:
        """Fit the wrapped model's mesh-dependent state on the training mesh."""
        fit_model_mesh(self._model, mesh)


__all__ = ["MeshOperator", "WrappedOperator", "fit_model_mesh"]
