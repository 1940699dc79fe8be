r"""The former model call ``model(x, pos, weight, batch)``, moved names, and foreign modules.

Models and operators are called ``op(x, mesh, *, query=None)`` with a
:class:`~geoattn.mesh.Mesh`. The former call

.. code-block:: python

    model(x, pos, weight, batch, pos_query=..., weight_query=..., batch_query=...)

still works for one minor version: :class:`~geoattn.models.NeuralOperator` and
:class:`~geoattn.operators.MeshOperator` hand any call whose second argument is not a
:class:`~geoattn.mesh.Mesh` to :func:`legacy_call`, which warns with a
:class:`DeprecationWarning` (once per call site, by Python's warning filters) and calls
``model(x, Mesh(pos, weight, batch=batch), query=...)``. Each such call makes a new
:class:`~geoattn.mesh.Mesh`, so structure derived from the mesh (radius graphs, patches, ...) is
rebuilt on every call: keep a :class:`~geoattn.mesh.Mesh` and pass it to keep its structure.

A module written for the former call (a model of another library, say) is not recognised: wrap
it with :class:`MeshCall` to call it as ``op(x, mesh, *, query=None)``.

Names that moved (the ``geoattn.train`` re-export modules, ``ResolvedQuadrature``) are served by
:func:`moved` with a :class:`DeprecationWarning` naming the new home.
"""

from __future__ import annotations

import importlib
import warnings

import torch

from .mesh.mesh import Mesh

__all__ = ["MeshCall", "former_relative_h1", "former_relative_l2", "legacy_call", "legacy_fit", "moved"]

_QUERY_KEYWORDS = ("pos_query", "weight_query", "batch_query")


def _legacy_query(pos_query, weight_query, batch_query) -> Mesh | None:
    from .models.base import mesh_of

    if pos_query is None:
        if weight_query is not None or batch_query is not None:
            raise ValueError("weight_query/batch_query without pos_query: give the query nodes too")
        return None
    if weight_query is None:  # a query for a decoder that only reads its nodes
        query = Mesh(pos_query, pos_query.new_ones(pos_query.shape[0]), batch=batch_query)
        query.weights_known = False
        return query
    return mesh_of(None, pos_query, weight_query, batch_query)


def legacy_call(op: torch.nn.Module, x: torch.Tensor, pos, weight=None, batch=None, *args,
                query: Mesh | None = None, stacklevel: int = 3, **kwargs) -> torch.Tensor:
    """``op(x, Mesh(pos, weight, batch=batch), query=Mesh(pos_query, weight_query, ...))``, the
    former call, with a :class:`DeprecationWarning` at the caller's line (``stacklevel`` as for
    :func:`warnings.warn`, counted from this function's caller). Also the place that refuses a
    :class:`~geoattn.mesh.Mesh` given with further positional or keyword arguments."""
    name = getattr(op, "__qualname__", None) or type(op).__name__
    if isinstance(pos, Mesh):
        raise TypeError(f"{name}: call it as op(x, mesh) or op(x, mesh, query=query_mesh); the Mesh "
                        f"carries pos, weight, cells and the batch layout (got further arguments "
                        f"{sorted(kwargs) or len(args) + (weight is not None) + (batch is not None)})")
    if pos is None:
        raise TypeError(f"{name}: call it as op(x, mesh) with a geoattn.mesh.Mesh")
    if args:
        raise TypeError(f"{name}: too many positional arguments: op(x, mesh, *, query=None)")
    old = {k: kwargs.pop(k) for k in _QUERY_KEYWORDS if k in kwargs}
    if kwargs:
        raise TypeError(f"{name}: unexpected keyword argument(s) {sorted(kwargs)}; "
                        "call it as op(x, mesh) or op(x, mesh, query=query_mesh)")
    from .models.base import mesh_of

    warnings.warn(f"{name}(x, pos, weight, batch) is deprecated and will be removed in the next minor "
                  f"version: call it as {name}(x, mesh) with mesh = geoattn.mesh.Mesh(pos, weight, "
                  "batch=batch), and a query mesh as query=Mesh(...) (a Mesh kept between calls also "
                  "keeps its derived structure)", DeprecationWarning, stacklevel=stacklevel)
    mesh = mesh_of(x, pos, weight, batch)
    if old:
        if query is not None:
            raise TypeError(f"{name}: give query=Mesh(...) or the former pos_query/weight_query/"
                            "batch_query, not both")
        query = _legacy_query(*(old.get(k) for k in _QUERY_KEYWORDS))
    return op(x, mesh) if query is None else op(x, mesh, query=query)


def legacy_fit(model: torch.nn.Module, pos, weight=None, cells=None) -> None:
    """``model.fit_mesh(Mesh(pos, weight, cells))``, the former ``model.fit_mesh(pos, weight,
    cells)``, with a :class:`DeprecationWarning` at the caller's line."""
    name = type(model).__name__
    if isinstance(pos, Mesh):
        raise TypeError(f"{name}.fit_mesh(mesh): the Mesh carries its weights and cells")
    if not torch.is_tensor(pos) or weight is None:
        raise TypeError(f"{name}.fit_mesh takes the training geoattn.mesh.Mesh")
    warnings.warn(f"{name}.fit_mesh(pos, weight, cells) is deprecated and will be removed in the next "
                  f"minor version: call {name}.fit_mesh(Mesh(pos, weight, cells))", DeprecationWarning,
                  stacklevel=3)
    model.fit_mesh(Mesh(pos, weight, cells))


class MeshCall(torch.nn.Module):
    """A module written for the former call, ``module(x, pos, weight, batch)`` (with
    ``pos_query``, ``weight_query``, ``batch_query`` keywords for a query side), called as the
    models of this package are: ``MeshCall(module)(x, mesh, *, query=None)``.

    The wrapped module is ``self.module`` (its parameters and state dict entries sit under
    ``module.``); its ``in_channels``, ``out_channels``, ``dim`` and ``check_inputs`` are
    forwarded when it has them.
    """

    def __init__(self, module: torch.nn.Module):
        super().__init__()
        self.module = module

    def __getattr__(self, name: str):
        try:
            return super().__getattr__(name)
        except AttributeError:
            if name in ("in_channels", "out_channels", "dim", "check_inputs", "fit_mesh", "model_name",
                        "hparams"):
                return getattr(self._modules["module"], name)
            raise

    def forward(self, x: torch.Tensor, mesh: Mesh, *, query: Mesh | None = None) -> torch.Tensor:
        if query is None:
            return self.module(x, mesh.pos, mesh.weight, mesh.batch_vector)
        return self.module(x, mesh.pos, mesh.weight, mesh.batch_vector, pos_query=query.pos,
                           weight_query=query.weight, batch_query=query.batch_vector)


def moved(module: str, names: dict[str, str]):
    """A module ``__getattr__`` (PEP 562) for names that moved: ``names`` maps each former name
    to ``"package.module:name"``, served with a :class:`DeprecationWarning` naming the new home.
    Used by the former ``geoattn.train`` modules and for ``ResolvedQuadrature``."""
    def __getattr__(name: str):
        if name not in names:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        home, _, new = names[name].partition(":")
        warnings.warn(f"{module}.{name} is deprecated and will be removed in the next minor version: "
                      f"use {home}.{new}", DeprecationWarning, stacklevel=2)
        return getattr(importlib.import_module(home), new)

    return __getattr__


# ---------------------------------------------------------------- the former loss calls

def _former_loss_mesh(name: str, pos, weight, cells, batch) -> Mesh:
    warnings.warn(f"{name}(pred, target, weight, batch, num_graphs) is deprecated and will be removed in the "
                  f"next minor version: call {name}(pred, target, mesh) with the Mesh the model was called "
                  "on (geoattn.mesh.Mesh(pos, weight, cells, batch=batch))", DeprecationWarning, stacklevel=5)
    if pos is None:  # the L2 loss never read the nodes: any of the right shape will do
        pos = weight.new_zeros(weight.shape[0], 1)
    return Mesh(pos, weight, cells, batch=batch)


def former_relative_l2(pred, target, weight, batch=None, num_graphs=None, reduction: str = "mean",
                       eps: float = 0.0):
    """``relative_l2(pred, target, weight, batch, num_graphs)``, the former call, with a
    :class:`DeprecationWarning`. ``num_graphs`` beyond the batch's last graph is refused."""
    from .train.loss import relative_l2

    mesh = _former_loss_mesh("relative_l2", None, weight, None, batch)
    if num_graphs is not None and num_graphs != mesh.num_graphs:
        raise ValueError(f"num_graphs={num_graphs} but the batch vector holds {mesh.num_graphs} graphs")
    return relative_l2(pred, target, mesh, reduction=reduction, eps=eps)


def former_relative_h1(pred, target, pos, weight, cells, batch=None, num_graphs=None, reduction: str = "mean",
                       eps: float = 0.0):
    """``relative_h1(pred, target, pos, weight, cells, batch, num_graphs)``, the former call,
    with a :class:`DeprecationWarning`."""
    from .train.loss import relative_h1

    mesh = _former_loss_mesh("relative_h1", pos, weight, cells, batch)
    if num_graphs is not None and num_graphs != mesh.num_graphs:
        raise ValueError(f"num_graphs={num_graphs} but the batch vector holds {mesh.num_graphs} graphs")
    return relative_h1(pred, target, mesh, reduction=reduction, eps=eps)
