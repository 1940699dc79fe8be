r"""Ensembles: the mean of independently trained operators, and their spread.

Operators trained from different initial weights and sample orders make different errors where
the training samples leave the map undetermined. Their mean,

.. math::
    \bar{\mathcal G}(a) = \frac{1}{K} \sum_{k=1}^K \mathcal G_k(a),

is never worse in mean square than the members' average error (Jensen), and gains most where a
model is limited by its samples rather than by its training steps. Each member is an operator on every mesh, so the
mean is too, and it keeps the members' invariance under mesh changes. The members' standard
deviation at each node (:meth:`Ensemble.spread`) says where they disagree.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from ..errors import ConfigError
from ..mesh.mesh import Mesh
from .wrapper import WrappedOperator


class Ensemble(WrappedOperator):
    """The mean of the outputs of ``members``, operators of one contract.

    Args:
        members: at least one operator ``op(x, mesh) -> [N, C_out]`` (models, or
            :class:`~geoattn.operators.NormalizedOperator`), all of the same input and output
            channels and spatial dimension.

    ``forward(x, mesh, *, query=None)`` returns the mean of the members' outputs ``[N, C_out]``;
    :meth:`spread` their standard deviation. The cost is the members' together.

    Raises:
        ConfigError: no members, or members of different channels or dimension.
    """

    def __init__(self, members: Sequence[nn.Module]):
        super().__init__()
        members = list(members)
        if not members:
            raise ConfigError("an ensemble needs at least one member")
        self.members = nn.ModuleList(members)
        contract = [(m, self._contract(m)) for m in members]
        for m, c in contract[1:]:
            if c != contract[0][1]:
                raise ConfigError(f"ensemble members differ: (in_channels, out_channels, dim) = {contract[0][1]} "
                                  f"for {type(contract[0][0]).__name__}, {c} for {type(m).__name__}")

    @staticmethod
    def _contract(op: nn.Module) -> tuple:
        model = getattr(op, "model", op)
        return tuple(getattr(model, k, None) for k in ("in_channels", "out_channels", "dim"))

    @property
    def op(self) -> nn.Module:  # the contract (channels, dimension, checks) is the first member's
        return self.members[0]

    def outputs(self, x: torch.Tensor, mesh: Mesh, *args, query: Mesh | None = None, **kwargs) -> torch.Tensor:
        """Every member's output, ``[K, N, C_out]``."""
        if not isinstance(mesh, Mesh) or args or kwargs:
            from ..compat import legacy_call

            return legacy_call(self.outputs, x, mesh, *args, query=query, **kwargs)
        return torch.stack([m(x, mesh) if query is None else m(x, mesh, query=query) for m in self.members])

    def forward(self, x: torch.Tensor, mesh: Mesh, *, query: Mesh | None = None) -> torch.Tensor:
        return self.outputs(x, mesh, query=query).mean(0)

    def spread(self, x: torch.Tensor, mesh: Mesh, *args, query: Mesh | None = None, **kwargs) -> torch.Tensor:
        """The members' standard deviation at every node, ``[N, C_out]`` (over ``K``, not
        ``K - 1``: zero for one member)."""
        if not isinstance(mesh, Mesh) or args or kwargs:
            from ..compat import legacy_call

            return legacy_call(self.spread, x, mesh, *args, query=query, **kwargs)
        return self.outputs(x, mesh, query=query).std(0, correction=0)

    def __len__(self) -> int:
        return len(self.members)




__all__ = ["Ensemble"]
