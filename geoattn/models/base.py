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

from ..errors import ChannelError, ConfigError, DimensionError, DTypeError

MODELS: dict[str, type[NeuralOperator]] = {}

#: constructor arguments renamed since checkpoints were first written: old name -> new name
RENAMED_ARGUMENTS = {"heads": "num_heads"}

log = logging.getLogger(__name__)


class NeuralOperator(nn.Module):
    """A map between functions discretised as ``(x [N, C_in], pos [N, d], weight [N])``.

    Subclasses take ``in_channels``, ``out_channels`` and ``dim`` (spatial dimension) first and
    implement ``forward(x, pos, weight, batch=None, *, ...)``, with any structure (a query mesh,
    a partition) in keyword arguments. :meth:`check_inputs` rejects inputs of the wrong width or
    dimension with a typed error instead of a shape error inside torch.
    """

    model_name: str = ""
    #: Meshes whose per-mesh structures (radius graphs, patch stencils) a model keeps
    #: (:class:`~geoattn.mesh.cache.StructureCache`; ``0``: rebuild them in every forward pass).
    cache_size: int = 8
    hparams: dict[str, Any]

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
            if isinstance(depth, int) and depth < 1:  # no block: a pointwise map, not an operator
                raise ConfigError(f"{cls.__name__}: depth must be at least 1, got {depth}")
            init(self, *args, **kw)
            if type(self) is cls:
                self.hparams = {k: v for k, v in bound.arguments.items() if k != "self"}

        cls.__init__ = recording_init

    def fit_mesh(self, pos: torch.Tensor, weight: torch.Tensor, cells: torch.Tensor | None = None) -> None:
        """Fit the model's mesh-dependent state on the training mesh, once, before training.

        Nothing for most models; the patched models (:class:`~geoattn.models.patched.PatchedOperator`)
        fit their partition here, which is then part of the model (saved in checkpoints and used on
        every mesh). :class:`~geoattn.train.Trainer` calls it with the first training sample; a
        model that already has such state keeps it.
        """

    def check_inputs(self, x: torch.Tensor, pos: torch.Tensor, weight: torch.Tensor | None = None) -> None:
        """Raise :class:`~geoattn.errors.DimensionError` / :class:`~geoattn.errors.ChannelError`
        when ``pos`` or ``x`` do not match the dimension and channels the model was built for, and
        :class:`~geoattn.errors.DTypeError` when ``x``, ``pos`` (or ``weight``, if given) are not
        of the dtype of the model's parameters.

        Inputs are never cast silently: a float16 or bfloat16 field given to a float32 model (or
        float32 to a float64 one) is refused with the dtypes named; cast the inputs with
        ``.to(dtype)`` or the model with ``model.to(dtype)``. Mixed precision through
        :func:`torch.autocast` passes float32 inputs to a float32 model and is unaffected."""
        dtype = next((p.dtype for p in self.parameters() if p.is_floating_point()), None)
        for name, t in (("x", x), ("pos", pos), ("weight", weight)):
            if dtype is not None and t is not None and t.dtype != dtype:
                raise DTypeError(
                    f"{type(self).__name__} has {dtype} parameters but got {name} of dtype {t.dtype}; "
                    f"cast the inputs with .to({dtype}) or the model with .to({t.dtype})")
        if pos.dim() != 2 or pos.shape[1] != self.dim:
            raise DimensionError(
                f"{type(self).__name__} was built for {self.dim}-D coordinates but got pos of shape "
                f"{tuple(pos.shape)}; use a mesh of dimension {self.dim} or build a model with dim={pos.shape[-1]}")
        if x.dim() != 2 or x.shape[1] != self.in_channels:
            raise ChannelError(
                f"{type(self).__name__} expects {self.in_channels} input channel(s) but got x of shape "
                f"{tuple(x.shape)}; pass a field with {self.in_channels} component(s)")
        if x.shape[0] != pos.shape[0]:
            raise ChannelError(f"x has {x.shape[0]} rows but pos has {pos.shape[0]} nodes")


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
