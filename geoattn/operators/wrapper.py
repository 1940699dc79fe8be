"""The base of the operators that stand in for a model: the call contract
``op(x, mesh, *, query=None)`` (the former bare-tensor call bridged by
:func:`geoattn.models.base.call_arguments`), and :class:`WrappedOperator`, an operator around
another that exposes the wrapped model's contract (channels, dimension, input checks)."""

from __future__ import annotations

import functools
import inspect

import torch

from ..mesh.mesh import Mesh
from ..models.base import call_arguments


class MeshOperator(torch.nn.Module):
    """A module called as ``op(x, mesh, *, query=None)`` (``mesh`` a :class:`~geoattn.mesh.Mesh`);
    the former call ``op(x, pos, weight, batch=None)`` is made into a :class:`~geoattn.mesh.Mesh`
    by :func:`~geoattn.models.base.call_arguments` (a new one per call: keep a
    :class:`~geoattn.mesh.Mesh` to keep its structure)."""

    def __call__(self, x: torch.Tensor, mesh=None, *args, **kwargs) -> torch.Tensor:
        mesh, query = call_arguments(mesh, args, kwargs, x)
        if kwargs:
            raise TypeError(f"{type(self).__name__}: unexpected keyword argument(s) {sorted(kwargs)}; "
                            "call it as op(x, mesh) or op(x, mesh, query=query_mesh)")
        return super().__call__(x, mesh, query=query)


def takes_mesh(op) -> bool:
    """Whether ``op`` is called ``op(x, mesh)``: a model or an operator of this package, or a
    module whose ``forward`` names its second parameter ``mesh`` (a foreign module written for
    the former ``op(x, pos, weight, batch)`` is not)."""
    if isinstance(op, torch.nn.parallel.DistributedDataParallel):
        return takes_mesh(op.module)
    if isinstance(op, MeshOperator) or getattr(type(op), "_takes_mesh", None) is not None:
        return True
    if isinstance(op, torch.nn.Module):
        return _forward_takes_mesh(type(op))  # once per class: this runs in every forward pass
    return _names_mesh(op)


@functools.lru_cache(maxsize=None)
def _forward_takes_mesh(cls: type) -> bool:
    return _names_mesh(cls.forward, bound=False)


def _names_mesh(fn, bound: bool = True) -> bool:
    try:
        params = list(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        return True
    first = 1 if bound else 2  # after x (and self, unbound)
    return len(params) > first and params[first] == "mesh"


def call_inner(op: torch.nn.Module, x: torch.Tensor, mesh: Mesh, query: Mesh | None = None) -> torch.Tensor:
    """``op(x, mesh)``, or ``op(x, mesh, query=query)`` when there is a query mesh; a module
    written for the former call gets ``op(x, pos, weight, batch)`` (:func:`takes_mesh`)."""
    if not takes_mesh(op):
        if query is None:
            return op(x, mesh.pos, mesh.weight, mesh.batch_vector)
        return op(x, mesh.pos, mesh.weight, mesh.batch_vector, pos_query=query.pos,
                  batch_query=query.batch_vector)
    return op(x, mesh) if query is None else op(x, mesh, query=query)


def fit_model_mesh(model: torch.nn.Module, mesh: Mesh) -> None:
    """``model.fit_mesh(mesh)``; a model whose ``fit_mesh`` still takes ``(pos, weight, cells)``
    gets those of ``mesh``. Nothing for a model without ``fit_mesh``."""
    fit = getattr(model, "fit_mesh", None)
    if fit is None:
        return
    params = list(inspect.signature(fit).parameters)
    if params and params[0] == "pos":
        fit(mesh.pos, mesh.weight, mesh.cells)
    else:
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


__all__ = ["MeshOperator", "WrappedOperator", "call_inner", "fit_model_mesh", "takes_mesh"]
