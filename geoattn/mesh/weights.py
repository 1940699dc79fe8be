"""Quadrature weights for functions seen at the nodes of a mesh or a point cloud.

A function ``u`` known at nodes ``x_i`` is integrated as :math:`\\int_D u\\,dx \\approx
\\sum_i w_i u(x_i)`. Every sum over nodes in geoattn is such a quadrature, so the weights decide
whether a model is a discretisation of one continuum operator. Rules and their accuracy for a
smooth integrand (``h`` a mesh size, ``N`` the number of nodes, ``d`` the dimension):

- ``"lumped"``: :math:`w_i = \\int \\varphi_i` (P1/Q1 hat functions); exact for affine ``u``,
  :math:`O(h^2)` for smooth ``u``.
- ``"voronoi"``: the volume of node ``i``'s Voronoi cell clipped to a box; exact for constants,
  :math:`O(N^{-1/2-1/d})` or better on i.i.d. random clouds, :math:`O(N^{-2})` in 1-D where it is the trapezoid rule.
- ``"knn"``: :math:`|B(r_k)|/(k-1)`, ``r_k`` the distance to the ``k``-th neighbour (a density
  estimate); :math:`O(N^{-1/2})` for any smooth sampling density.
- ``"surface_knn"``: for a point cloud on a surface in 3-D, the area of each node's Voronoi cell
  in its tangent plane among its ``k`` nearest neighbours (:func:`surface_knn_weights`).
  Surface meshes (triangles or quads in 3-D) get ``"lumped"`` area weights,
  :math:`w_i = \\int_S \\varphi_i\\,dA`, :math:`O(h^2)` on a smooth surface
  (:mod:`~geoattn.mesh.surface`).
- ``"monte_carlo"``: :math:`|D|/N`; :math:`O(N^{-1/2})` *only* for uniform sampling, biased
  otherwise. :func:`node_average_weights` turns any weights into these, graph by graph.

On a periodic domain (a torus stored without its closing nodes) :func:`periodic_weights` gives
the periodic trapezoid rule on tensor grids (exact for trigonometric polynomials on uniform
grids) and the periodic Voronoi rule on any other point set.

The Voronoi and kNN rules reflect the cloud across the faces of the box, which clips Voronoi cells
to the box exactly and removes the boundary bias of the kNN volume estimate; both are then scaled
so that the weights sum to the box volume.

Every rule runs in float64 on the nodes centred on their bounding box and scaled to unit size
(:func:`unit_frame`), and the weights are scaled back by ``scale ** d``: a mesh far from the
origin (geographic coordinates) or in tiny or huge units gets the weights of the same mesh at the
origin in unit size, times ``scale ** d``. The weights are then cast to the dtype asked for,
which must hold them as normal numbers (:func:`cast_weights`), else a
:class:`~geoattn.errors.WeightError` says why.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from scipy.spatial import ConvexHull, Voronoi, cKDTree

from ..errors import DimensionError, MeshError, WeightError
from .cells import lumped_mass
from .quadrature import integrate
from .surface import is_surface, surface_lumped_mass
from .validation import unit_frame, validate_points

RULES = ("lumped", "voronoi", "knn", "monte_carlo", "surface_knn")


def _box_array(box, pos: np.ndarray) -> np.ndarray:
    """``box`` as an array ``[2, d]`` of lower and upper corners (default: the bounding box)."""
    d = pos.shape[1]
    if box is None:
        return np.stack([pos.min(0), pos.max(0)])
    box = np.asarray(box, dtype=float)
    if box.shape != (2, d):
        raise DimensionError(f"box must have shape [2, {d}] (lower and upper corners), got {box.shape}")
    if not (box[1] > box[0]).all():
        raise MeshError(f"box upper corner {box[1].tolist()} must exceed the lower {box[0].tolist()}")
    outside = ((pos < box[0] - 1e-12) | (pos > box[1] + 1e-12)).any(axis=1)
    if outside.any():
        i = int(np.flatnonzero(outside)[0])
        raise MeshError(f"node {i} at {pos[i].tolist()} lies outside the box {box.tolist()}")
    return box


def _reflect(pos: np.ndarray, box: np.ndarray) -> np.ndarray:
    """The cloud and its mirror images across each of the ``2d`` faces of ``box``."""
    images = [pos]
    for k in range(pos.shape[1]):
        for side in (0, 1):
            mirrored = pos.copy()
            mirrored[:, k] = 2 * box[side, k] - pos[:, k]
            images.append(mirrored)
    return np.concatenate(images)


def voronoi_weights(pos: np.ndarray, box=None) -> np.ndarray:
    """Volumes of the Voronoi cells of the nodes, clipped to ``box`` (default: bounding box)."""
    pos = validate_points(pos)
    box = _box_array(box, pos)
    n, d = pos.shape
    if d == 1:
        x = pos[:, 0]
        order = np.argsort(x)
        xs = x[order]
        edges = np.concatenate([[box[0, 0]], 0.5 * (xs[1:] + xs[:-1]), [box[1, 0]]])
        weight = np.empty(n)
        weight[order] = np.diff(edges)
        return weight
    if n < d + 1:
        raise MeshError(f"the Voronoi rule needs at least {d + 1} points in {d}-D, got {n}")
    vor = Voronoi(_reflect(pos, box))
    regions = [vor.regions[r] for r in vor.point_region[:n]]
    if d == 3:
        return np.array([ConvexHull(vor.vertices[r]).volume for r in regions])
    return _convex_polygon_areas(vor.vertices, regions)


def _convex_polygon_areas(vertices: np.ndarray, regions: list[list[int]]) -> np.ndarray:
    """Areas of convex polygons given by unordered vertex lists (vectorised shoelace formula)."""
    size = max(len(r) for r in regions)
    index = np.array([r + [r[0]] * (size - len(r)) for r in regions])  # pad by repeating a vertex
    v = vertices[index]  # (n, size, 2)
    centre = v.mean(axis=1, keepdims=True)
    angle = np.arctan2(v[..., 1] - centre[..., 1], v[..., 0] - centre[..., 0])
    v = np.take_along_axis(v, np.argsort(angle, axis=1)[..., None], axis=1)  # counter-clockwise
    w = np.roll(v, -1, axis=1)
    # repeated vertices are adjacent after sorting, so their edges have zero length and add nothing
    return 0.5 * np.abs((v[..., 0] * w[..., 1] - w[..., 0] * v[..., 1]).sum(axis=1))


def periodic_weights(pos, period, origin=0.0) -> np.ndarray:
    r"""Quadrature weights ``[N]`` of points on the torus :math:`\prod_k [a_k, a_k + L_k)`.

    The points are a periodic point set: the closing nodes (:math:`a_k + L_k`, the images of
    :math:`a_k`) are absent, as in the usual layout :math:`x_j = a + jL/n`, :math:`j < n`.

    - On a tensor grid (every combination of the distinct coordinates of each axis is a node,
      once), the product of the 1-D periodic trapezoid rules
      :math:`w_i = \prod_k \tfrac12 (x^{(k)}_{j+1} - x^{(k)}_{j-1})` (neighbours taken cyclically,
      the closing node being :math:`x^{(k)}_0 + L_k`). On a uniform grid, :math:`w_i = |T| / N`,
      it is exact for every trigonometric polynomial of degree below :math:`n_k` along each axis
      (spectral accuracy for smooth periodic functions); on a graded grid it is second order.
    - On any other point set, the volumes of the Voronoi cells of the points for the periodic
      distance (the cells of the originals among their :math:`3^d - 1` periodic copies), which
      tile the torus: exact for constants, and of the order of the Voronoi rule on a smoothly
      deformed grid (second order) or a random cloud (see the module docstring). In 1-D this is the
      periodic trapezoid rule on any nodes.

    The weights sum to :math:`|T| = \prod_k L_k` (to rounding) and do not change when the set
    is translated modulo the periods.

    Args:
        pos: points ``[N, d]`` (numpy or torch) in :math:`\prod_k [a_k, a_k + L_k)`, distinct.
        period: :math:`L`, one float or one per axis.
        origin: :math:`a`, one float or one per axis (default ``0``).

    Returns:
        ``[N]`` float64 weights.

    Raises:
        MeshError: a point outside the torus, or two points at the same place.
    """
    p = validate_points(pos)
    n, d = p.shape
    length = np.broadcast_to(np.asarray(period, dtype=float), (d,)).copy()
    low = np.broadcast_to(np.asarray(origin, dtype=float), (d,)).copy()
    if not (np.isfinite(length).all() and (length > 0).all()):
        raise ValueError(f"period must be positive and finite, one value or {d}, got {period!r}")
    outside = ((p < low) | (p >= low + length)).any(axis=1)
    if outside.any():
        i = int(np.flatnonzero(outside)[0])
        raise MeshError(f"point {i} at {p[i].tolist()} is outside the torus [{low.tolist()}, "
                        f"{(low + length).tolist()}): reduce the coordinates modulo the period first")
    xi = p - low  # (N, d) in [0, L)
    axes = [np.unique(xi[:, k], return_inverse=True) for k in range(d)]
    if math.prod(len(values) for values, _ in axes) == n:
        cell = np.ravel_multi_index([inverse.reshape(-1) for _, inverse in axes],
                                    [len(values) for values, _ in axes])
        if len(np.unique(cell)) == n:  # every grid node exactly once: a tensor grid
            w = np.ones(n)
            for k, (values, inverse) in enumerate(axes):
                w *= _periodic_segments(values, length[k])[inverse.reshape(-1)]
            return w
    _, first, count = np.unique(xi, axis=0, return_index=True, return_counts=True)
    if (count > 1).any():
        i = int(first[np.flatnonzero(count > 1)[0]])
        raise MeshError(f"point {i} at {p[i].tolist()} appears more than once")
    if n < d + 1:
        raise MeshError(f"the periodic Voronoi rule needs at least {d + 1} points in {d}-D, got {n}")
    scale = length.max()  # the Voronoi diagram in a frame of unit size, as the other rules
    shifts = np.array(list(np.ndindex(*(3,) * d)), dtype=float) - 1.0  # (3^d, d), the zero shift first
    shifts = shifts[np.argsort(np.abs(shifts).sum(1), kind="stable")]
    tiled = (xi[None] + shifts[:, None] * length) / scale  # (3^d, N, d), originals first
    vor = Voronoi(tiled.reshape(-1, d))
    regions = [vor.regions[r] for r in vor.point_region[:n]]
    if any(not r or -1 in r for r in regions):
        raise MeshError("a periodic Voronoi cell is unbounded: the points are too few or degenerate")
    if d == 3:
        w = np.array([ConvexHull(vor.vertices[r]).volume for r in regions])
    else:
        w = _convex_polygon_areas(vor.vertices, regions)
    return w * scale**d


def _periodic_segments(x: np.ndarray, length: float) -> np.ndarray:
    """1-D periodic trapezoid weights of sorted distinct nodes ``x`` in ``[0, length)``."""
    ext = np.concatenate([[x[-1] - length], x, [x[0] + length]])
    return 0.5 * (ext[2:] - ext[:-2])


def knn_weights(pos: np.ndarray, k: int = 8, box=None) -> np.ndarray:
    """k-nearest-neighbour volume weights ``|B(r_k)| / (k - 1)``, scaled to the box volume."""
    pos = validate_points(pos)
    n, d = pos.shape
    if not 2 <= k < n:
        raise ValueError(f"k must satisfy 2 <= k < N = {n}, got {k}")
    box = _box_array(box, pos)
    tree = cKDTree(_reflect(pos, box))
    r = tree.query(pos, k=k + 1)[0][:, -1]  # the first neighbour is the node itself
    ball = math.pi ** (d / 2) / math.gamma(d / 2 + 1) * r**d
    weight = ball / (k - 1)
    return weight * (np.prod(box[1] - box[0]) / weight.sum())


#: Directions of the polygon that clips a tangent-plane Voronoi cell (:func:`surface_knn_weights`).
_RIM = 16


def surface_knn_weights(pos: np.ndarray, k: int = 30) -> np.ndarray:
    r"""Area weights ``[N]`` of a point cloud sampled on a surface in 3-D (no cells).

    Around each node the ``k`` nearest neighbours give a tangent plane (the two leading principal
    axes of the neighbourhood, PCA); the neighbours are mapped into it (the direction of their
    projection, at their distance in 3-D: a first-order logarithmic map, which does not shrink
    the neighbourhood on a curved surface as a projection does), and the node's weight is
    the area of its Voronoi cell among them in that plane: the half-planes
    :math:`\{y : y \cdot p_j \le |p_j|^2 / 2\}`, intersected as the polar of the convex hull of
    :math:`2 p_j / |p_j|^2`. Beyond the ``k``-th neighbour's distance :math:`r_k` the cell is
    not known from the neighbours (a farther node may cut it), so it is clipped to the polygon
    :math:`\{y : y \cdot u_m \le r_k\}` around the disc of radius :math:`r_k` (``u_m`` 16 unit
    directions); this also bounds the cells of nodes on the rim of an open surface (which it
    overestimates). These cells tile a smooth closed surface up to the curvature of the tangent
    planes and the neighbours missed by ``k``, so their sum approximates the surface's
    area (the tests hold it on random clouds on a sphere).

    Args:
        pos: nodes ``[N, 3]`` on a surface.
        k: neighbours per node (at least 4, fewer than ``N``).
    """
    pos = validate_points(pos)
    n, d = pos.shape
    if d != 3:
        raise DimensionError(f"the 'surface_knn' rule is for surfaces in 3-D, got {d}-D nodes")
    if not 4 <= k < n:
        raise ValueError(f"k must satisfy 4 <= k < N = {n}, got {k}")
    dist, idx = cKDTree(pos).query(pos, k=k + 1)  # [N, k + 1], the node itself first
    rel = pos[idx[:, 1:]] - pos[:, None]  # [N, k, 3]
    centred = rel - rel.mean(axis=1, keepdims=True)
    _, _, axes = np.linalg.svd(centred, full_matrices=False)  # [N, 3, 3], rows by variance
    plane = np.einsum("nkd,nad->nka", rel, axes[:, :2])  # [N, k, 2] tangent coordinates
    length = np.linalg.norm(plane, axis=-1, keepdims=True)  # [N, k, 1]
    plane = plane * (dist[:, 1:, None] / np.maximum(length, 1e-300))  # directions kept, 3-D distances
    polar = 2 * plane / np.maximum((plane**2).sum(-1, keepdims=True), 1e-300)  # [N, k, 2]
    angle = 2 * math.pi * np.arange(_RIM) / _RIM
    rim = np.stack([np.cos(angle), np.sin(angle)], axis=1)  # [R, 2]
    polar = np.concatenate([polar, rim[None] / dist[:, -1:, None]], axis=1)  # [N, k + R, 2]
    weight = np.empty(n)
    for i in range(n):
        eq = ConvexHull(polar[i]).equations  # [F, 3]: normal . q + offset <= 0 inside
        offset = -eq[:, 2]  # > 0: the rim keeps the origin inside the hull
        corners = eq[:, :2] / offset[:, None]  # [F, 2] vertices of the Voronoi cell
        corners = corners[np.argsort(np.arctan2(eq[:, 1], eq[:, 0]))]
        nxt = np.roll(corners, -1, axis=0)
        weight[i] = 0.5 * abs(float((corners[:, 0] * nxt[:, 1] - nxt[:, 0] * corners[:, 1]).sum()))
    return weight


def quadrature_weights(pos, cells=None, cell_type: str | None = None, *, rule: str | None = None,
                       box=None, k: int | None = None, volume: float | None = None) -> torch.Tensor:
    """Quadrature weights ``[N]`` for functions sampled at the nodes ``pos [N, d]``.

    Args:
        pos: node coordinates ``[N, d]`` (numpy array or tensor).
        cells: cell connectivity ``[M, V]`` for the ``"lumped"`` rule.
        cell_type: meshio cell type of ``cells``.
        rule: one of ``"lumped"`` (default when cells are given; on a surface mesh, triangles
            or quads in 3-D, the lumped area weights), ``"voronoi"`` (default for a point cloud
            with a ``box``), ``"knn"``, ``"monte_carlo"`` (default otherwise), or
            ``"surface_knn"`` for a point cloud sampled on a surface in 3-D
            (:func:`surface_knn_weights`; ``k`` neighbours, default 30 for it).
        box: ``[[lower...], [upper...]]`` corners of the domain for the point-cloud rules (default:
            the bounding box of the points).
        k: neighbour count of the ``"knn"`` (default 8) and ``"surface_knn"`` (default 30)
            rules.
        volume: domain measure ``|D|`` for ``"monte_carlo"`` (default: the box volume).

    Returns:
        A float64 tensor (or ``pos``'s floating dtype when ``pos`` is a tensor) of non-negative
        weights.
    """
    if rule is None:
        rule = "lumped" if cells is not None else ("voronoi" if box is not None else "monte_carlo")
    dtype = pos.dtype if isinstance(pos, torch.Tensor) and pos.is_floating_point() else torch.float64
    device = pos.device if isinstance(pos, torch.Tensor) else None
    p = validate_points(pos)
    if rule not in RULES:
        raise ValueError(f"unknown quadrature rule {rule!r}; choose one of {RULES}")
    if box is not None:
        box = _box_array(box, p)  # checked in the user's units, before the change of frame
    centre, scale = unit_frame(p if box is None else np.concatenate([p, box]))
    d = p.shape[1]
    surface = rule == "surface_knn" or (rule == "lumped" and is_surface(cell_type, d))
    measure = scale ** (2 if surface else d)  # the measure of the unit frame's box in the user's units
    p = (p - centre) / scale
    if box is not None:
        box = (box - centre) / scale
    if rule == "lumped":
        if cells is None or cell_type is None:
            raise ValueError("the 'lumped' rule needs cells and cell_type")
        cells = cells.detach().cpu().numpy() if isinstance(cells, torch.Tensor) else cells
        w = (surface_lumped_mass if is_surface(cell_type, d) else lumped_mass)(p, cells, cell_type)
    elif rule == "voronoi":
        w = voronoi_weights(p, box)
    elif rule == "knn":
        w = knn_weights(p, 8 if k is None else k, box)
    elif rule == "surface_knn":
        if box is not None:
            raise ValueError("the 'surface_knn' rule takes no box")
        w = surface_knn_weights(p, 30 if k is None else k)
    else:  # monte_carlo
        if volume is None:
            b = _box_array(box, p)
            volume = float(np.prod(b[1] - b[0]))
        else:
            volume = volume / measure
        w = np.full(len(p), volume / len(p))
    return cast_weights(w * measure, dtype, device)


def cast_weights(weight: np.ndarray, dtype: torch.dtype = torch.float64, device=None) -> torch.Tensor:
    """Float64 weights ``[N]`` as a tensor of ``dtype``, refusing a dtype in which a positive
    weight would underflow (to zero or a subnormal number, which keeps few significant digits)
    or overflow.

    Raises:
        WeightError: naming the weights' range, the dtype's normal range and what to do.
    """
    weight = np.asarray(weight, dtype=np.float64)
    info = torch.finfo(dtype)
    positive = weight[weight > 0]
    if positive.size:
        low, high = float(positive.min()), float(positive.max())
        if low < info.tiny or high > info.max:
            what = "underflow to zero" if low < info.tiny else "overflow to infinity"
            raise WeightError(
                f"the quadrature weights range from {low:.3g} to {high:.3g} and would {what} in "
                f"{dtype} (normal numbers from {info.tiny:.3g} to {info.max:.3g}): the coordinates "
                f"are too {'small' if low < info.tiny else 'large'} for {dtype}. Rescale them (a "
                "weight is a volume: dividing the coordinates by s divides it by s ** d; "
                "from_meshio and read_mesh take scale=) or use a wider dtype (float64)")
    return torch.as_tensor(weight, dtype=dtype, device=device)


def node_average_weights(weight: torch.Tensor, batch: torch.Tensor | None = None) -> torch.Tensor:
    """Uniform weights :math:`|D_b| / N_b` on each graph ``b``, with the same total as ``weight``.

    .. math::
        \\bar w_i = \\frac{1}{N_b} \\sum_{j \\in b} w_j \\qquad (i \\in b),

    so that a quadrature with them is the node average times the domain measure: the
    ``"monte_carlo"`` rule, which ignores how the nodes are spread (the ablation of
    :class:`~geoattn.train.NormalizedOperator` with ``unweighted=True``).

    Args:
        weight: quadrature weights ``[N]``.
        batch: graph index of each node ``[N]`` (default ``None``: one graph).

    Shapes:
        - output: ``[N]``.
    """
    if batch is None:
        return torch.ones_like(weight) * integrate(torch.ones_like(weight), weight) / weight.numel()
    total = integrate(torch.ones_like(weight), weight, batch)  # [B]
    count = integrate(torch.ones_like(weight), torch.ones_like(weight), batch)  # [B]
    return (total / count)[batch]
