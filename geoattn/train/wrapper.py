"""The base of the operators that wrap another one (a model or a NormalizedOperator) and stand in
for it: they expose the wrapped model's contract (channels, dimension, input checks)."""

from __future__ import annotations

import torch


class WrappedOperator(torch.nn.Module):
    """An operator around ``self.op``: ``in_channels``, ``out_channels``, ``dim`` and
    :meth:`check_inputs` are those of the wrapped model (a
    :class:`~geoattn.train.NormalizedOperator`'s model, or the operator itself)."""

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


__all__ = ["WrappedOperator"]
