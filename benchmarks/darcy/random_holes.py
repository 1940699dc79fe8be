"""The ``random_holes`` family of the Darcy race: a domain and a mesh of its own for every sample.

Sample ``i`` of seed ``s`` lies on the unit square without 1 to 3 discs (:func:`draw_discs`: radii
in :data:`RADII`, at least :data:`GAP` from each other and from the square's sides), drawn from
``(s, i)`` alone. Its mesh (:func:`holed_mesh`) is made without gmsh: the sides and the circles
split into chords of about the target edge ``h``, a jittered, turned hexagonal lattice of spacing
``h`` kept at least ``0.55 h`` from them, their Delaunay triangulation, and the triangles whose
three vertices lie on one circle (the holes' insides) removed. Every chord is then an edge of the
triangulation (its diametral disc holds no other point for ``h <= 2 GAP``), which the mesh's area
checks: it is the square's less the inscribed polygons'.

:func:`random_holes_samples` solves the Darcy samples (the coefficient laws of
:func:`geoattn.data.darcy.coefficient`, on the unit square's field) in parallel processes: the
training samples on meshes of about the scale's node count, the test samples on new domains at
that size (``"train"``) and on the same domains meshed 1.5 times finer per axis (``"finer"``).
"""

from __future__ import annotations

import math
import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor

import numpy as np

#: Radii of the holes (lowest, highest), the least gap between two holes and between a hole and
#: the square's sides, and the number of holes (fewest, most).
RADII = (0.05, 0.15)
GAP = 0.05
HOLES = (1, 3)
#: Largest target edge :func:`holed_mesh` uses: at most ``2 GAP``, so that every chord is a
#: Delaunay edge (coarser requests get this edge).
MAX_EDGE = 0.08
#: The test meshes' edge relative to the training edge ("finer": 1.5 times finer per axis).
FINER = 1.5
_SALT = 0x401E5  # keeps the domains' random stream apart from the coefficients'


def draw_discs(seed: int, index: int) -> tuple[tuple[float, float, float], ...]:
    """The holes ``(cx, cy, r)`` of sample ``index``: 1 to 3 discs, radii in :data:`RADII`,
    centres uniform where the disc keeps :data:`GAP` from the sides and from the other discs."""
    rng = np.random.default_rng([seed, index, _SALT])
    count = int(rng.integers(HOLES[0], HOLES[1] + 1))
    while True:
        discs = []
        for _ in range(100 * count):
            r = rng.uniform(*RADII)
            c = rng.uniform(r + GAP, 1 - r - GAP, 2)
            if all(math.hypot(c[0] - x, c[1] - y) >= r + s + GAP for x, y, s in discs):
                discs.append((float(c[0]), float(c[1]), float(r)))
                if len(discs) == count:
                    return tuple(discs)
        # (rare) the first discs left no room: draw them all again


def _edge_for(discs, nodes: int) -> float:
    """The lattice spacing that gives about ``nodes`` nodes: the lattice's ``2 / (sqrt(3) h^2)``
    points per area less the bands of ``0.55 h`` it leaves along the boundary, plus the boundary's
    ``L / h`` points, solved for ``h``."""
    area = 1.0 - sum(math.pi * r * r for _, _, r in discs)
    length = 4.0 + sum(2 * math.pi * r for _, _, r in discs)
    density = 2 / math.sqrt(3)
    b = length * (1 - 0.55 * density)  # nodes = density * area / h^2 + b / h
    inv = (-b + math.sqrt(b * b + 4 * density * area * nodes)) / (2 * density * area)
    return 1.0 / inv


def holed_mesh(discs, nodes: int, seed: int | tuple[int, ...] = 0) -> tuple[np.ndarray, np.ndarray]:
    """A triangle mesh of the unit square without ``discs`` with about ``nodes`` nodes: points
    ``[N, 2]`` and counter-clockwise cells ``[T, 3]``; ``seed`` places the lattice.

    Raises:
        RuntimeError: the triangulation failed its checks (a chord missing, a flat cell, an
            unused node), naming which; it cannot for edges up to :data:`MAX_EDGE`.
    """
    from scipy.spatial import Delaunay

    h = min(_edge_for(discs, nodes), MAX_EDGE)
    rng = np.random.default_rng([*np.atleast_1d(seed).tolist(), _SALT])
    k = max(2, math.ceil(1 / h))
    t = np.linspace(0.0, 1.0, k + 1)[:-1]
    sides = np.concatenate([np.stack([t, 0 * t], 1), np.stack([1 + 0 * t, t], 1),
                            np.stack([1 - t, 1 + 0 * t], 1), np.stack([0 * t, 1 - t], 1)])
    rings, on = [], [np.full(len(sides), -1)]
    for j, (cx, cy, r) in enumerate(discs):
        m = max(12, math.ceil(2 * math.pi * r / h))
        a = rng.uniform(0, 2 * np.pi) + 2 * np.pi * np.arange(m) / m
        rings.append(np.stack([cx + r * np.cos(a), cy + r * np.sin(a)], 1))
        on.append(np.full(m, j))
    # the lattice: rows h sqrt(3)/2 apart, every other one shifted by h / 2, turned and shifted
    # at random, each point jittered by up to 0.15 h
    rows = np.arange(-0.75, 0.75, h * math.sqrt(3) / 2)  # covers the square turned about its centre
    cols = np.arange(-0.75, 0.75, h)
    gx, gy = np.meshgrid(cols, rows)
    gx = gx + (np.arange(len(rows))[:, None] % 2) * h / 2
    lattice = np.stack([gx.ravel(), gy.ravel()], 1)
    turn = rng.uniform(0, np.pi / 3)
    rot = np.array([[np.cos(turn), -np.sin(turn)], [np.sin(turn), np.cos(turn)]])
    lattice = lattice @ rot.T + 0.5 + rng.uniform(-h, h, 2)
    lattice += rng.uniform(-0.15 * h, 0.15 * h, lattice.shape)
    keep = (lattice.min(1) >= 0.55 * h) & (lattice.max(1) <= 1 - 0.55 * h)
    for cx, cy, r in discs:
        keep &= np.hypot(lattice[:, 0] - cx, lattice[:, 1] - cy) >= r + 0.55 * h
    points = np.concatenate([sides, *rings, lattice[keep]])
    on = np.concatenate(on + [np.full(int(keep.sum()), -1)])
    cells = Delaunay(points).simplices
    circle = on[cells]
    inside = (circle[:, 0] >= 0) & (circle[:, 0] == circle[:, 1]) & (circle[:, 1] == circle[:, 2])
    cells = cells[~inside]
    a, b, c = (points[cells[:, i]] for i in range(3))
    area = (b - a)[:, 0] * (c - a)[:, 1] - (b - a)[:, 1] * (c - a)[:, 0]
    cells = np.where((area < 0)[:, None], cells[:, [0, 2, 1]], cells)
    area = np.abs(area) / 2
    polygons = sum(len(ring) / 2 * r * r * math.sin(2 * math.pi / len(ring)) for ring, (_, _, r) in zip(rings, discs))
    if abs(area.sum() - (1 - polygons)) > 1e-9:
        raise RuntimeError(f"holed_mesh: the cells cover {area.sum():.12f}, the domain {1 - polygons:.12f}: "
                           f"a chord is not an edge (h = {h:.4g})")
    if area.min() < 1e-6 * h * h:
        raise RuntimeError(f"holed_mesh: cell {int(area.argmin())} is flat (area {area.min():.3g}, h = {h:.4g})")
    if len(np.unique(cells)) != len(points):
        raise RuntimeError(f"holed_mesh: {len(points) - len(np.unique(cells))} nodes are in no cell")
    return points, cells.astype(np.int64)


def _meshio(points: np.ndarray, cells: np.ndarray):
    import meshio

    return meshio.Mesh(points, [("triangle", cells)])


def _solve(job) -> dict:
    """Sample ``index`` on its domain's meshes ``{name: nodes}``: ``{name: MeshData}`` (with the
    sample refined once as ``name + "_refined"`` for the names in ``refine``)."""
    from geoattn.data import refined_samples
    from geoattn.data.darcy import DarcyProblem, sample_data, solve_sample
    from geoattn.mesh import from_meshio

    seed, index, family, field, sizes, refine = job
    discs = draw_discs(seed, index)
    meshes = {name: _meshio(*holed_mesh(discs, nodes, seed=(seed, index, j)))
              for j, (name, nodes) in enumerate(sizes.items())}
    problems = {name: DarcyProblem(mesh) for name, mesh in meshes.items()}
    out = {}
    for name, (a, u) in solve_sample(problems, field, seed, index, family).items():
        out[name] = sample_data(from_meshio(meshes[name]), a, u)
        if name in refine:
            fine = refined_samples([out[name]])[0]
            if "mesh_id" in fine:  # its number in a one-sample set: meaningless in the whole set
                del fine["mesh_id"]
            out[name + "_refined"] = fine
    return out


def unit_square_field():
    """The coefficient field of the race on the unit square (the square domain's)."""
    from geoattn.data.grf import preset

    return preset("cao", box=(np.zeros(2), np.ones(2)))


def random_holes_samples(sizes: dict[str, int], n: int, seed: int, family: str, start: int = 0,
                         workers: int = 1, refine: tuple[str, ...] = ()) -> dict[str, list]:
    """Samples ``start .. start + n - 1``, each on its own domain (:func:`draw_discs`), meshed
    for every ``{name: nodes}`` of ``sizes`` (the same domain and coefficient on each), solved by
    ``workers`` processes (the same samples for any number). ``refine``: names whose samples are
    also returned carried to their mesh refined once (``name + "_refined"``,
    :func:`geoattn.data.refined_samples`), made in the workers."""
    field = unit_square_field()
    jobs = [(seed, i, family, field, dict(sizes), tuple(refine)) for i in range(start, start + n)]
    workers = max(1, min(workers, n))
    if workers == 1:
        parts = [_solve(job) for job in jobs]
    else:
        from .meshes import _ONE_THREAD

        saved = {k: os.environ.get(k) for k in _ONE_THREAD}
        os.environ.update(_ONE_THREAD)
        try:
            with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn")) as pool:
                parts = list(pool.map(_solve, jobs, chunksize=max(1, n // (4 * workers))))
        finally:
            for k, v in saved.items():
                os.environ.pop(k) if v is None else os.environ.__setitem__(k, v)
    return {name: [p[name] for p in parts] for name in (parts[0] if parts else sizes)}


def example_meshes(nodes: int, seed: int = 0) -> dict[str, object]:
    """The meshes of sample 0's domain (``"train"``: about ``nodes`` nodes, ``"finer"``), as
    :func:`darcy.meshes.benchmark_meshes` gives a fixed domain's: they size the models."""
    discs = draw_discs(seed, 0)
    return {name: _meshio(*holed_mesh(discs, n, seed=(seed, 0, j)))
            for j, (name, n) in enumerate(test_sizes(nodes).items())}


def test_sizes(nodes: int) -> dict[str, int]:
    """Nodes of the test meshes of each domain: ``"train"`` the training meshes' ``nodes``,
    ``"finer"`` :data:`FINER` times finer per axis."""
    return {"train": nodes, "finer": round(nodes * FINER**2)}
