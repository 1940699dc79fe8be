"""The base class of every neural operator and the ``build_model`` registry.

A model subclass registers itself by name (``class TNO(NeuralOperator, name="tno")``) and the
constructor arguments of every subclass are recorded automatically in ``model.hparams``, so a
checkpoint stores ``(name, hparams, state_dict)`` and :func:`build_model` rebuilds the model from
them. Only field-to-field models of the datasets (what ``geoattn train`` offers) are registered.
"""

from __future__ import annotations

import functools
import inspect
import logging
from typing import Any

import torch
from torch import nn

from ..errors import (BatchOrderError, ChannelError, ConfigError, DeviceError, DimensionError, DTypeError,
                      FieldLengthError, NonFiniteError, WeightError)
from ..mesh.mesh import Mesh
from ..mesh.validation import checked_number, validate_weights

MODELS: dict[str, type[NeuralOperator]] = {}

#: constructor arguments renamed since checkpoints were first written: old name -> new name
RENAMED_ARGUMENTS = {"heads": "num_heads"}

log = logging.getLogger(__name__)


class NeuralOperator(nn.Module):
    """A map between functions on meshes: ``model(x, mesh, *, query=None)``.

    ``x [N, C_in]`` holds the input's values at the nodes of ``mesh`` (a
    :class:`~geoattn.mesh.Mesh`: nodes, quadrature weights, optional cells, batch layout and a
    memo of derived structure); ``query`` is another :class:`~geoattn.mesh.Mesh` for the models
    that answer on other nodes. The former call ``model(x, pos, weight, batch)`` still works for
    one minor version, with a :class:`DeprecationWarning` (:func:`geoattn.compat.legacy_call`).

    Subclasses take ``in_channels``, ``out_channels`` and ``dim`` (spatial dimension) first and
    implement ``forward(x, mesh, *, query=None)``. :meth:`check_inputs` rejects inputs of the wrong
    width or dimension with a typed error instead of a shape error inside torch.
    """

    model_name: str = ""
    hparams: dict[str, Any]
    #: the constructor's numeric options and how each is checked before the model is built: the
    #: keywords of :func:`~geoattn.mesh.validation.checked_number` (``integer``, ``positive``,
    #: ``minimum``, ``below``), and ``each=True`` for an option that may also be a sequence of
    #: such numbers (``modes=(8, 4)``). A value of any real type (NumPy scalars, 0-d tensors) is
    #: taken as a Python number; a boolean, NaN, infinity, a value out of range or a fraction where
    #: a whole number is needed is refused with a :class:`~geoattn.errors.ConfigError` naming the
    #: model and the option. ``None`` (an option left to its default) is not checked.
    numeric_options: dict[str, dict] = {}

    def __init_subclass__(cls, name: str | None = None, **kwargs):
        super().__init_subclass__(**kwargs)
        if name is not None:
            if name in MODELS:
                raise ValueError(f"model name {name!r} is already registered by {MODELS[name].__name__}")
            MODELS[name] = cls
            cls.model_name = name
        init = cls.__init__
        signature = inspect.signature(init)

        @functools.wraps(init)
        def recording_init(self, *args, **kw):
            bound = signature.bind(self, *args, **kw)
            bound.apply_defaults()
            depth = bound.arguments.get("depth")
            if isinstance(depth, int) and not isinstance(depth, bool) and depth < 1:  # a pointwise map
                raise ConfigError(f"{cls.__name__}: depth must be at least 1, got {depth}")
            checked = checked_options(cls.__name__, cls.numeric_options, bound.arguments)
            if checked:
                bound.arguments.update(checked)
                args, kw = bound.args[1:], bound.kwargs
            init(self, *args, **kw)
            if type(self) is cls:  # plain Python values: checkpoints load with weights_only
                self.hparams = {k: _plain(v) for k, v in bound.arguments.items() if k != "self"}

        cls.__init__ = recording_init

    def __call__(self, x: torch.Tensor, mesh: Mesh | None = None, *args, **kwargs) -> torch.Tensor:
        if isinstance(mesh, Mesh) and not args and set(kwargs) <= {"query"}:
            query = kwargs.get("query")
            return super().__call__(x, mesh) if query is None else super().__call__(x, mesh, query=query)
        refuse_pyg_data(self, x, mesh)
        from ..compat import legacy_call

        return legacy_call(self, x, mesh, *args, **kwargs)

    def fit_mesh(self, mesh: Mesh) -> None:
        """Fit the model's mesh-dependent state on the training mesh, once, before training.

        Nothing for most models; the patched models (:class:`~geoattn.models.patched.PatchedOperator`)
        fit their partition here, which is then part of the model (saved in checkpoints and used on
        every mesh). :class:`~geoattn.train.Trainer` calls it with the first training mesh; a
        model that already has such state keeps it.
        """

    def check_inputs(self, x: torch.Tensor, pos: torch.Tensor, weight: torch.Tensor | None = None) -> None:
        """Refuse inputs of another dimension, width or dtype than the model's, with a typed error
        (:func:`~geoattn.models.base.check_inputs`)."""
        check_inputs(self, x, pos, weight)

    def check_call(self, x: torch.Tensor, mesh: Mesh) -> None:
        """Everything a forward pass checks first (:func:`~geoattn.models.base.check_call`)."""
        check_call(self, x, mesh)


#: the options every model of :mod:`geoattn.models` has: whole numbers >= 1
COMMON_OPTIONS = {name: {"integer": True} for name in ("in_channels", "out_channels", "dim", "width", "depth")}
#: a dropout rate: a number in [0, 1)
DROPOUT = {"positive": False, "minimum": 0.0, "below": 1.0}


def checked_options(model: str, rules: dict[str, dict], arguments: dict) -> dict:
    """The values of the numeric options ``rules`` (see :attr:`NeuralOperator.numeric_options`)
    among the constructor's ``arguments``, checked and made Python numbers."""
    out = {}
    for name, rule in rules.items():
        value = arguments.get(name)
        if value is None:
            continue
        rule = dict(rule)
        each = rule.pop("each", False)
        try:
            if each and isinstance(value, (list, tuple)):
                out[name] = type(value)(checked_number(name, v, **rule) for v in value)
            else:
                out[name] = checked_number(name, value, **rule)
        except ConfigError as err:
            raise ConfigError(f"{model}: {err}") from None
    return out


def _plain(value):
    """``value`` with NumPy scalars and 0-d tensors made Python numbers (in lists and tuples too),
    so that a checkpoint's recorded arguments load with ``torch.load(weights_only=True)``."""
    if isinstance(value, (list, tuple)):
        return type(value)(_plain(v) for v in value)
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if torch.is_tensor(value) and value.dim() == 0:
        return value.item()
    item = getattr(value, "item", None)
    if item is not None and type(value).__module__ == "numpy" and getattr(value, "ndim", 1) == 0:
        return item()
    return value


def refuse_pyg_data(op: nn.Module, x, mesh) -> None:
    """Refuse a PyG ``Data`` or ``Batch`` passed as the input or as the mesh (``op(batch)``,
    ``op(batch.x, batch)``) with one line naming the call: a model takes ``x`` and a
    :class:`~geoattn.mesh.Mesh`, which carries the weights, cells and batch layout (and keeps the
    structure derived from them between calls), never a PyG object to read them from."""
    from torch_geometric.data.data import BaseData

    if isinstance(x, BaseData) or isinstance(mesh, BaseData):
        name = type(op).__name__
        given = type(x if isinstance(x, BaseData) else mesh).__name__
        raise TypeError(f"{name} takes (x, mesh), not a PyG {given}: call it as "
                        f"op(batch.x, Mesh.from_sample(batch)) (geoattn.mesh.Mesh.from_sample reads "
                        "pos, weight, cells and batch from it)")


def check_inputs(op: nn.Module, x: torch.Tensor, pos: torch.Tensor, weight: torch.Tensor | None = None) -> None:
    """Raise :class:`~geoattn.errors.DimensionError` / :class:`~geoattn.errors.ChannelError`
    when ``pos`` or ``x`` do not match the dimension and channels the module ``op`` was built for
    (``op.dim``, ``op.in_channels``), and
    :class:`~geoattn.errors.DTypeError` when ``x``, ``pos`` (or ``weight``, if given) are not
    of the dtype of its parameters.

    Inputs are never cast silently: a float16 or bfloat16 field given to a float32 model (or
    float32 to a float64 one) is refused with the dtypes named; cast the inputs with
    ``.to(dtype)`` or the model with ``model.to(dtype)``. Mixed precision through
    :func:`torch.autocast` passes float32 inputs to a float32 model and is unaffected."""
    dtype = next((p.dtype for p in op.parameters() if p.is_floating_point()), None)
    for name, t in (("x", x), ("pos", pos), ("weight", weight)):
        if dtype is not None and t is not None and t.dtype != dtype:
            raise DTypeError(
                f"{type(op).__name__} has {dtype} parameters but got {name} of dtype {t.dtype}; "
                f"cast the inputs with .to({dtype}) or the model with .to({t.dtype})")
    if pos.dim() != 2 or pos.shape[1] != op.dim:
        raise DimensionError(
            f"{type(op).__name__} was built for {op.dim}-D coordinates but got pos of shape "
            f"{tuple(pos.shape)}; use a mesh of dimension {op.dim} or build a model with dim={pos.shape[-1]}")
    if x.dim() != 2 or x.shape[1] != op.in_channels:
        raise ChannelError(
            f"{type(op).__name__} expects {op.in_channels} input channel(s) but got x of shape "
            f"{tuple(x.shape)}; pass a field with {op.in_channels} component(s)")
    if x.shape[0] != pos.shape[0]:
        raise ChannelError(f"x has {x.shape[0]} rows but pos has {pos.shape[0]} nodes")


def check_call(op: nn.Module, x: torch.Tensor, mesh: Mesh) -> None:
    """Everything a forward pass of ``op`` checks first: ``op.check_inputs(x, mesh.pos)``
    (:func:`check_inputs`), then the values.

    - the batch vector (if any) is one integer graph index per node, sorted and without gaps
      (``0, 0, ..., 1, 1, ..., B - 1``, as :class:`torch_geometric.data.Batch` makes it),
      else :class:`~geoattn.errors.BatchOrderError` (unsorted) or
      :class:`~geoattn.errors.FieldLengthError` (wrong shape or type);
    - the weights are one finite weight ``>= 0`` per node with a positive total per graph, else
      :class:`~geoattn.errors.WeightError` naming the first bad index
      (:func:`~geoattn.mesh.validate_weights`). Single zero weights are allowed: they are how
      padding nodes drop out of every quadrature;
    - ``x`` and ``pos`` are finite, else :class:`~geoattn.errors.NonFiniteError` naming how
      many nodes and the first one (a NaN would otherwise spread to every output through
      the quadratures).

    The checks are :math:`O(N)` on the inputs' device with one host synchronisation when the
    inputs are fine; only a failure looks up the offending index. The mesh's part (weights,
    batch order, finite coordinates) runs once per :class:`~geoattn.mesh.Mesh` (its
    ``checked`` flag); ``x`` is checked on every call. They are skipped while :func:`torch.compile`
    traces the model (``torch.compiler.is_compiling()``).
    """
    pos, weight, batch = mesh.pos, mesh.weight, mesh.batch_vector
    if torch.is_tensor(x) and x.device != pos.device:
        raise DeviceError(f"x is on {x.device} but the mesh on {pos.device}; move one of them: "
                          f"x.to(mesh.device), or mesh.to(x.device)")
    op.check_inputs(x, pos)
    if torch.compiler.is_compiling():
        return
    if x.shape[0] != mesh.num_nodes:
        raise ChannelError(f"x has {x.shape[0]} rows but the mesh has {mesh.num_nodes} nodes")
    if mesh.checked:
        if bool(torch.isfinite(x).all()):
            return
        raise_value_error(x, pos, weight, batch)
    n = x.shape[0]
    if not isinstance(weight, torch.Tensor) or weight.dim() != 1 or weight.shape[0] != n or n == 0:
        validate_weights(weight, n, batch=batch)  # names the problem
    if batch is not None and (not isinstance(batch, torch.Tensor) or batch.dim() != 1
                              or batch.shape[0] != n or batch.is_floating_point()
                              or batch.is_complex() or batch.dtype == torch.bool):
        validate_weights(weight, n, batch=batch)  # FieldLengthError naming the batch's shape
    acc = weight.to(torch.promote_types(weight.dtype, torch.float32))
    flags = [torch.isfinite(x).all(), torch.isfinite(pos).all(), acc.min() >= 0]
    if batch is None:
        total = acc.sum()  # quadrature-ok: the total weight |D|
        flags += [(total > 0) & torch.isfinite(total)]
    else:
        step = batch[1:] - batch[:-1]
        flags += [batch[0] == 0, ((step == 0) | (step == 1)).all()]
        # sorted without gaps: the graphs are 0..batch[-1] < n, so n slots hold every total
        total = acc.new_zeros(n).index_add_(0, batch.clamp(0, n - 1), acc)  # [n]
        used = torch.arange(n, device=batch.device) <= batch[-1]
        flags += [((total > 0) | ~used).all(), torch.isfinite(total).all()]
    if all(torch.stack(flags).tolist()):
        mesh.checked = True
        return
    raise_value_error(x, pos, weight, batch)


def mesh_of(x: torch.Tensor | None, pos: torch.Tensor, weight: torch.Tensor,
            batch: torch.Tensor | None = None) -> Mesh:
    """A new :class:`~geoattn.mesh.Mesh` of bare tensors ``pos [N, d]``, ``weight [N]``,
    ``batch [N]`` (optional) for values ``x [N, C]`` (optional), after the checks that must come
    before it is made, so that a bad weight or batch vector raises the typed error naming it
    (:func:`~geoattn.mesh.validate_weights`, :class:`~geoattn.errors.BatchOrderError`), not a
    shape error. For layers and models with tensor arguments (NAO's in-context call, the former
    model call of :mod:`geoattn.compat`); the values are checked by :func:`check_call`."""
    if not torch.is_tensor(pos):
        raise TypeError(f"expected a geoattn.mesh.Mesh (or node coordinates pos [N, d] with weight [N]), "
                        f"got {type(pos).__name__}")
    if weight is None:
        raise TypeError("node coordinates without weights: pass a geoattn.mesh.Mesh(pos, weight)")
    n = x.shape[0] if x is not None else pos.shape[0]
    bad_weight = not torch.is_tensor(weight) or weight.dim() != 1 or weight.shape[0] != n
    bad_batch = batch is not None and (not torch.is_tensor(batch) or batch.shape != (n,)
                                       or batch.is_floating_point() or batch.dtype == torch.bool)
    if bad_weight or bad_batch:
        validate_weights(weight, n, batch=batch)  # names the problem
    if batch is not None and n > 0:
        step = batch[1:] - batch[:-1]
        if bool((batch[0] != 0) | ((step != 0) & (step != 1)).any()):
            raise_value_error(x if x is not None else pos, pos, weight, batch)
    return Mesh(pos, weight, batch=batch)


def raise_value_error(x: torch.Tensor, pos: torch.Tensor, weight: torch.Tensor,
                       batch: torch.Tensor | None) -> None:
    """The typed error for inputs that failed :func:`check_call` (the slow path)."""
    n = x.shape[0]
    if batch is not None:
        low = int(batch.min())
        if low < 0:
            i = int(torch.nonzero(batch < 0)[0])
            raise FieldLengthError(f"batch gives node {i} the graph index {int(batch[i])}; "
                                   "graph indices start at 0")
        step = batch[1:] - batch[:-1]
        down, gap = step < 0, step > 1
        if bool(down.any()) or bool(batch[0] != 0) or bool(gap.any()):
            if bool(down.any()):
                i = int(torch.nonzero(down)[0]) + 1
                what = f"is not sorted: node {i} has graph {int(batch[i])} after graph {int(batch[i - 1])}"
            elif bool(batch[0] != 0):
                i = 0
                what = f"skips a graph index (an empty graph): it starts at graph {int(batch[0])}, not 0"
            else:
                i = int(torch.nonzero(gap)[0]) + 1
                what = (f"skips a graph index (an empty graph): node {i} has graph {int(batch[i])} "
                        f"after graph {int(batch[i - 1])}")
            raise BatchOrderError(
                f"the batch vector {what}; a batch vector must be sorted, "
                "0, 0, ..., 1, 1, ..., B - 1, as torch_geometric's Batch makes it. Build the "
                "batch with torch_geometric.data.Batch.from_data_list, or sort the nodes: "
                "order = batch.argsort(stable=True); x, pos, weight, batch = x[order], "
                "pos[order], weight[order], batch[order] (and renumber graphs 0..B-1)")
    validate_weights(weight, n, batch=batch)
    for name, t in (("pos", pos), ("x", x)):
        bad = ~torch.isfinite(t.reshape(n, -1)).all(dim=1)
        if bool(bad.any()):
            i = int(torch.nonzero(bad)[0])
            raise NonFiniteError(
                f"{name} is NaN or infinite at {int(bad.sum())} of {n} nodes, the first is node "
                f"{i} ({t[i].tolist()}); a non-finite {name} would spread through the "
                "quadratures to every output: fix or drop those nodes")
    raise WeightError("weights have a non-finite total; rescale them")  # pragma: no cover


def build_model(name: str, **kwargs) -> NeuralOperator:
    """Build the model registered as ``name`` (``"tno"``, ``"galerkin"``, ...) from keyword arguments."""
    if name not in MODELS:
        raise ValueError(f"unknown model {name!r}; available: {sorted(MODELS)}")
    for old, new in RENAMED_ARGUMENTS.items():
        if old in kwargs:
            if new in kwargs:
                raise ValueError(f"give {new!r} only ({old!r} is its former name)")
            log.warning("model argument %r is now called %r", old, new)
            kwargs[new] = kwargs.pop(old)
    return MODELS[name](**kwargs)
