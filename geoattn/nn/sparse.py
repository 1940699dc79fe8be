"""Constant sparse matrices as the layers use them: CSR built once per mesh, applied with their
transposes kept for the backward pass (:class:`SparseProduct`), and joined over a batch as a block
diagonal (:func:`block_diagonal`)."""

from __future__ import annotations

import warnings

import torch

__all__ = ["SparseProduct", "block_diagonal", "csr_matrix"]


class SparseProduct(torch.autograd.Function):
    """``S @ x`` for a constant CSR matrix ``S``, with ``S^T`` given as CSR too: torch's own
    backward through a CSR product transposes ``S`` at every call, many times the product's cost."""

    @staticmethod
    def forward(ctx, matrix, transpose, x):
        ctx.transpose = transpose
        return matrix @ x

    @staticmethod
    def backward(ctx, grad):
        return None, None, ctx.transpose @ grad


def _quiet_csr(build):
    """``build()`` without torch's note that CSR support is in beta (the products used here are
    tested)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta")
        return build()


def csr_matrix(rows: torch.Tensor, cols: torch.Tensor, values: torch.Tensor, shape: tuple[int, int]) -> torch.Tensor:
    """The CSR matrix of ``shape`` with ``values`` at ``(rows, cols)``, repeated entries summed."""
    coo = torch.sparse_coo_tensor(torch.stack([rows, cols]), values, shape, check_invariants=False)
    with torch.sparse.check_sparse_tensor_invariants(False):
        return _quiet_csr(lambda: coo.coalesce().to_sparse_csr())


def block_diagonal(blocks: list[torch.Tensor], col_starts: list[int], cols: int) -> torch.Tensor:
    """The CSR matrix with ``blocks`` down its diagonal (rows in order, block ``k`` from column
    ``col_starts[k]``), ``cols`` columns in all."""
    crow, col, shift = [], [], 0
    for m, start in zip(blocks, col_starts):
        crow.append(m.crow_indices()[:-1] + shift)
        col.append(m.col_indices() + start)
        shift += m.values().numel()
    crow.append(crow[0].new_tensor([shift]))
    values = torch.cat([m.values() for m in blocks])
    shape = (sum(m.shape[0] for m in blocks), cols)
    return _quiet_csr(lambda: torch.sparse_csr_tensor(torch.cat(crow), torch.cat(col), values, shape,
                                                              check_invariants=False))
