"""Per-mesh structures computed once: an LRU cache keyed by the exact contents of tensors.

Neighbour graphs, patch stencils and other structures depend only on a mesh (its nodes, weights,
batch vector) and a few settings, not on the function values, so a model that sees the same
mesh batch after batch builds them once. The key is a BLAKE2 digest of the tensors' bytes with
their shapes, dtypes and devices, plus any hashable settings: a mesh that differs in one bit, or
lives on another device, is another entry. Hashing reads the tensors once (and copies them from
a GPU), which costs far less than the KD-tree queries and sparse assemblies it saves.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any

import torch


def fingerprint(*tensors) -> tuple:
    """A hashable key naming the exact contents of ``tensors`` (their bytes, shapes, dtypes and
    devices; ``None`` entries allowed)."""
    digest = hashlib.blake2b(digest_size=16)
    meta = []
    for t in tensors:
        if t is None:
            meta.append(None)
            continue
        t = t.detach()
        meta.append((tuple(t.shape), str(t.dtype), str(t.device)))
        digest.update(t.contiguous().cpu().numpy().tobytes())
    return digest.hexdigest(), tuple(meta)


class StructureCache:
    """The ``size`` most recently used structures, each built once by :meth:`get`.

    ``size=0`` keeps nothing (every call builds), which is what a benchmark of the uncached path
    wants. The cache holds no parameters and is not part of a model's ``state_dict``.
    """

    def __init__(self, size: int = 8):
        if size < 0:
            raise ValueError(f"cache size must be >= 0, got {size}")
        self.size = size
        self._entries: OrderedDict = OrderedDict()
        self.hits = self.misses = 0

    @torch.compiler.disable
    def get(self, tensors: tuple, build: Callable[[], Any], settings: Hashable = ()) -> Any:
        """The structure of ``tensors`` (and ``settings``): from the cache, else ``build()``.

        Runs eagerly under :func:`torch.compile` (hashing and building use NumPy and SciPy).
        """
        key = (fingerprint(*tensors), settings)
        if key in self._entries:
            self.hits += 1
            self._entries.move_to_end(key)
            return self._entries[key]
        self.misses += 1
        value = build()
        if self.size:
            self._entries[key] = value
            while len(self._entries) > self.size:
                self._entries.popitem(last=False)
        return value

    def clear(self) -> None:
        self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(size={self.size}, entries={len(self)}, hits={self.hits}, misses={self.misses})"


__all__ = ["StructureCache", "fingerprint"]
