r"""Symmetries of a problem, used as data: samples carried to the images of their mesh.

When the domain :math:`D`, the equation and the law of the inputs are invariant under an isometry
:math:`g(x) = Q(x - c) + c` (:math:`Q` orthogonal), the operator commutes with it: if :math:`u` solves
the problem for the input :math:`a`, then :math:`u \circ g^{-1}` solves it for
:math:`a \circ g^{-1}`. Darcy flow :math:`-\nabla\cdot(a\nabla u) = f` with a constant :math:`f` and
zero boundary values is such a problem on the square under its eight symmetries (the dihedral
group :math:`D_4` about the centre), and the coefficient law of
:class:`~geoattn.data.grf.GaussianRandomField` on the square box is invariant under them too (a
reflection changes the sign of some cosines, which changes the sign of their independent
centred coefficients; the swap of the axes swaps modes of equal variance).

For a sample on a mesh, :math:`a \circ g^{-1}` at the image nodes :math:`g(x_i)` is :math:`a(x_i)`,
so the transformed sample is the same values on the moved nodes, with the same quadrature weights
(an isometry keeps every cell's volume). :func:`augment` makes these samples: a training set
of :math:`S` samples becomes :math:`|G|\,S` samples on :math:`|G|` meshes, a way to learn from
samples one does not have to solve for, and a mesh-native model sees :math:`|G|` discretisations
of the domain instead of one.

What is checked and what is not:

- every map must be an isometry (orthogonal :math:`Q` to 1e-9), and it must carry the domain onto
  itself (:func:`check_symmetry`: the moved nodes stay near the nodes, and on a 2-D mesh the moved
  boundary nodes stay on the boundary), else :class:`~geoattn.errors.SymmetryError` names the map
  and the node;
- that the *equation and the input law* are invariant is the caller's knowledge: a forcing that
  is not symmetric, or a coefficient law on a box that the map does not fix, makes the augmented
  samples wrong data. The values are carried as scalars: vector-valued fields (velocities,
  gradients) would have to be rotated too and are not.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch
from scipy.spatial import cKDTree

from ..errors import SymmetryError

# Vertex orders that reverse a cell's orientation (meshio/VTK orderings).
_REVERSE = {
    "line": [1, 0],
    "triangle": [0, 2, 1],
    "quad": [0, 3, 2, 1],
    "tetra": [0, 1, 3, 2],
    "hexahedron": [0, 3, 2, 1, 4, 7, 6, 5],
}


@dataclass(frozen=True)
class Isometry:
    r"""The map :math:`x \mapsto Q(x - c) + c`.

    Args:
        matrix (array-like): the orthogonal matrix :math:`Q`, ``[d, d]``.
        center (array-like): the fixed point :math:`c`, ``[d]``.
        name (str, optional): a label for messages (default: ``""``).

    Raises:
        SymmetryError: ``matrix`` is not square, not orthogonal (to 1e-9), or ``center`` has the
            wrong length.
    """

    matrix: np.ndarray
    center: np.ndarray
    name: str = field(default="", compare=False)

    def __post_init__(self):
        q = np.asarray(self.matrix, dtype=float)
        c = np.asarray(self.center, dtype=float).reshape(-1)
        if q.ndim != 2 or q.shape[0] != q.shape[1] or len(c) != q.shape[0]:
            raise SymmetryError(f"an isometry needs a square matrix and a centre of its size, got "
                                f"matrix {q.shape} and centre {c.shape}")
        if not np.allclose(q.T @ q, np.eye(len(q)), atol=1e-9, rtol=0):
            raise SymmetryError(f"{self.name or 'the map'}: the matrix is not orthogonal "
                                f"(|Q^T Q - I| = {np.abs(q.T @ q - np.eye(len(q))).max():.2e})")
        object.__setattr__(self, "matrix", q)
        object.__setattr__(self, "center", c)

    @property
    def dim(self) -> int:
        return len(self.center)

    @property
    def reflects(self) -> bool:
        """Whether the map reverses orientation (:math:`\\det Q < 0`)."""
        return bool(np.linalg.det(self.matrix) < 0)

    def inverse(self) -> Isometry:
        """The inverse map :math:`x \\mapsto Q^T(x - c) + c`."""
        return Isometry(self.matrix.T, self.center, f"inverse of {self.name}" if self.name else "")

    def __call__(self, points):
        """The images of ``points`` ``[N, d]`` (numpy or torch; same kind, dtype and device)."""
        if isinstance(points, torch.Tensor):
            if points.ndim != 2 or points.shape[1] != self.dim:
                raise SymmetryError(f"{self.name or 'the map'} acts on {self.dim}-D points, got shape "
                                    f"{tuple(points.shape)}")
            wide = torch.float64 if points.device.type == "cpu" else torch.promote_types(points.dtype, torch.float32)
            q = torch.as_tensor(self.matrix, dtype=wide, device=points.device)
            c = torch.as_tensor(self.center, dtype=wide, device=points.device)
            return ((points.to(wide) - c) @ q.T + c).to(points.dtype)
        p = np.asarray(points)
        if p.ndim != 2 or p.shape[1] != self.dim:
            raise SymmetryError(f"{self.name or 'the map'} acts on {self.dim}-D points, got shape {p.shape}")
        return ((p.astype(float) - self.center) @ self.matrix.T + self.center).astype(
            p.dtype if np.issubdtype(p.dtype, np.floating) else float)

    def __repr__(self) -> str:
        return f"Isometry({self.name!r})" if self.name else f"Isometry({self.matrix.tolist()}, {self.center.tolist()})"


def dihedral(order: int, center=(0.0, 0.0), angle: float = 0.0) -> list[Isometry]:
    r"""The dihedral group of ``2 * order`` plane isometries about ``center``: the rotations by
    :math:`2\pi k / \text{order}` and the reflections across the lines through ``center`` at angles
    ``angle`` :math:`+ \pi k / \text{order}`, :math:`k = 0, \dots, \text{order} - 1`; the identity first.

    ``dihedral(4, (0.5, 0.5))`` are the eight symmetries of the unit square; ``dihedral(1, c, a)`` is
    the identity and the reflection across one line (the L-shape ``[-1, 1]^2`` minus the lower right
    quadrant: ``dihedral(1, (0, 0), -pi / 4)``).
    """
    if isinstance(order, bool) or not isinstance(order, (int, np.integer)) or order < 1:
        raise SymmetryError(f"order must be a positive integer, got {order!r}")
    out = []
    for k in range(order):
        t = 2 * math.pi * k / order
        out.append(Isometry([[math.cos(t), -math.sin(t)], [math.sin(t), math.cos(t)]], center,
                            f"rotation by {360 * k / order:g} degrees"))
    for k in range(order):
        t = 2 * (angle + math.pi * k / order)  # reflection across the line at angle t / 2
        out.append(Isometry([[math.cos(t), math.sin(t)], [math.sin(t), -math.cos(t)]], center,
                            f"reflection across the line at {math.degrees(t / 2):g} degrees"))
    return out


def _edges(cells: np.ndarray, cell_type: str | None) -> np.ndarray:
    """Every cell's edges ``[E, 2]`` (sorted node pairs, with repeats)."""
    v = cells.shape[1]
    if cell_type == "quad":
        pairs = [(0, 1), (1, 2), (2, 3), (3, 0)]
    elif cell_type == "hexahedron":
        pairs = [(0, 1), (1, 2), (2, 3), (3, 0), (4, 5), (5, 6), (6, 7), (7, 4),
                 (0, 4), (1, 5), (2, 6), (3, 7)]
    else:  # simplices: every pair
        pairs = [(i, j) for i in range(v) for j in range(i + 1, v)]
    return np.sort(np.concatenate([cells[:, list(p)] for p in pairs]), axis=1)


def _boundary_segments(cells: np.ndarray, cell_type: str | None) -> np.ndarray:
    """The boundary edges of a 2-D mesh (edges of one cell only), ``[B, 2]``."""
    edges, counts = np.unique(_edges(cells, cell_type), axis=0, return_counts=True)
    return edges[counts == 1]


def _segment_distance(points: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Distance from every point ``[N, 2]`` to the nearest of the segments ``a[k] b[k]``."""
    ab = b - a  # [B, 2]
    t = np.einsum("nbd,bd->nb", points[:, None] - a[None], ab) / np.maximum((ab**2).sum(1), 1e-300)
    nearest = a[None] + np.clip(t, 0.0, 1.0)[..., None] * ab[None]  # [N, B, 2]
    return np.linalg.norm(points[:, None] - nearest, axis=-1).min(1)


def check_symmetry(sample, isometries: Iterable[Isometry], tol: float | None = None) -> None:
    """Check that every map carries the sample's domain onto itself.

    - Every moved node lies within the longest cell edge of one of the sample's nodes (without
      cells: twice the largest nearest-neighbour distance), so no node leaves the domain.
    - On a 2-D mesh, every moved boundary node lies within ``tol`` of the boundary (default: 5 % of
      the longest edge, which leaves room for a curved boundary's chords), so the boundary goes to
      the boundary; a wrong centre or angle moves it inside or out.

    Raises:
        SymmetryError: naming the first map that fails, the node, and how far it lands.
    """
    pos = sample.pos.detach().to("cpu", torch.float64).numpy()
    cells = getattr(sample, "cells", None)
    cells = cells.cpu().numpy() if torch.is_tensor(cells) and cells.numel() else None
    cell_type = getattr(sample, "cell_type", None)
    tree = cKDTree(pos)
    if cells is not None:
        edges = _edges(cells, cell_type)
        reach = float(np.linalg.norm(pos[edges[:, 0]] - pos[edges[:, 1]], axis=1).max())
    else:
        reach = 2 * float(tree.query(pos, k=2)[0][:, 1].max())
    boundary = None
    if cells is not None and pos.shape[1] == 2 and cell_type in ("triangle", "quad"):
        segments = _boundary_segments(cells, cell_type)
        boundary = (np.unique(segments), pos[segments[:, 0]], pos[segments[:, 1]])
        tol = 0.05 * reach if tol is None else float(tol)
    for g in isometries:
        if g.dim != pos.shape[1]:
            raise SymmetryError(f"{g!r} acts on {g.dim}-D points, the sample has {pos.shape[1]}-D nodes")
        moved = g(pos)
        dist = tree.query(moved)[0]
        worst = int(np.argmax(dist))
        if dist[worst] > reach:
            raise SymmetryError(f"{g!r} does not map the domain onto itself: node {worst} at "
                                f"{pos[worst].tolist()} goes to {moved[worst].tolist()}, "
                                f"{dist[worst]:.3g} from the nearest node (longest edge {reach:.3g})")
        if boundary is not None:
            nodes, a, b = boundary
            dist = _segment_distance(moved[nodes], a, b)
            worst = int(np.argmax(dist))
            if dist[worst] > tol:
                node = int(nodes[worst])
                raise SymmetryError(f"{g!r} does not map the boundary onto itself: boundary node {node} at "
                                    f"{pos[node].tolist()} goes to {moved[node].tolist()}, {dist[worst]:.3g} "
                                    f"from the boundary (tolerance {tol:.3g})")


def transform(sample, g: Isometry):
    """A copy of ``sample`` on the image mesh ``g(mesh)``: nodes moved, values and weights kept,
    cells reordered to keep their orientation when ``g`` reflects."""
    out = sample.clone()
    out.pos = g(sample.pos)
    cells = getattr(sample, "cells", None)
    if g.reflects and torch.is_tensor(cells):
        cell_type = getattr(sample, "cell_type", None)
        if cell_type not in _REVERSE:
            raise SymmetryError(f"cannot reverse the orientation of {cell_type!r} cells for {g!r}")
        out.cells = cells[:, _REVERSE[cell_type]]
    return out


class SymmetricImages(Sequence):
    """Every sample on every image of its mesh, made when read: item ``i * len(isometries) + k`` is
    ``transform(samples[i], isometries[k])``.

    Nothing is copied up front, so a lazily read dataset stays lazy (and ``len(isometries)`` times
    longer). With ``check`` (default), each mesh is checked with :func:`check_symmetry` (``tol``
    passed on) the first time one of its samples is read, so a map that does not carry the domain
    onto itself raises :class:`~geoattn.errors.SymmetryError` before any of its images is used.
    Slices give lists.
    """

    def __init__(self, samples: Sequence, isometries: Sequence[Isometry], check: bool = True,
                 tol: float | None = None):
        self.samples, self.isometries = samples, list(isometries)
        if not self.isometries:
            raise SymmetryError("no isometries given")
        self.check, self.tol = check, tol
        self._checked: set = set()

    def __len__(self) -> int:
        return len(self.samples) * len(self.isometries)

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        n = len(self)
        if not -n <= index < n:
            raise IndexError(f"index {index} out of range for {n} images")
        i, k = divmod(index % n, len(self.isometries))
        sample = self.samples[i]
        if self.check:
            key = (tuple(sample.pos.shape), sample.pos.detach().cpu().numpy().tobytes())
            if key not in self._checked:
                check_symmetry(sample, self.isometries, self.tol)
                self._checked.add(key)
        return transform(sample, self.isometries[k])


def augment(samples: Sequence, isometries: Sequence[Isometry], check: bool = True,
            tol: float | None = None) -> SymmetricImages:
    """Every sample on every image of its mesh, in the order
    ``[transform(s, g) for s in samples for g in isometries]`` (:class:`SymmetricImages`, made when
    read). Give the identity among ``isometries`` to keep the original samples (:func:`dihedral`
    lists it first). With ``check`` (default), the first sample's mesh is checked at once
    (:func:`check_symmetry`, ``tol`` passed on), every other mesh when first read.
    """
    images = SymmetricImages(samples, isometries, check, tol)
    if check and len(images):
        _ = images[0]  # the first mesh checked now
    return images


__all__ = ["Isometry", "SymmetricImages", "augment", "check_symmetry", "dihedral", "transform"]
