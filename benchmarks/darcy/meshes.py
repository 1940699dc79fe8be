"""The domains of the Darcy race, their mesh families and the data sets solved on them.

:func:`benchmark_meshes` builds the meshes of one domain that carry the test samples (``"train"``
is the training mesh); :func:`solve_samples` solves the Darcy samples on them (in parallel
processes if asked, with the same samples for any number), :func:`reference_targets` scores them
against the twice-refined training mesh's solutions and :func:`fem_floor` measures how far each
mesh's own targets are from those.
"""

from __future__ import annotations

import contextlib
import io
import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch

from geoattn.data.darcy import DarcyProblem, darcy_samples, sample_data, solve_sample
from geoattn.data.grf import preset
from geoattn.mesh import families, from_meshio
from geoattn.mesh.interpolation import linear_interpolation
from geoattn.mesh.symmetry import dihedral

if TYPE_CHECKING:
    from .race import Scale


DOMAINS = ("square", "lshape", "holes", "square_holes", "pores", "heldout", "random_holes", "cube")
#: Domains whose every sample has a domain and a mesh of its own (:mod:`darcy.random_holes`).
PER_SAMPLE = ("random_holes",)
HOLES_MESH = Path(__file__).resolve().parents[2] / "meshes" / "disk_two_holes.msh"
HOLES_H = 0.08  # target edge length of ``HOLES_MESH`` (meshes/generate.py)

#: ``square_holes``: the unit square without two discs ``(cx, cy, r)``; training edge length.
SQUARE_HOLES = ((0.3, 0.35, 0.12), (0.68, 0.62, 0.09))
SQUARE_HOLES_H = 0.035
#: ``pores``: the unit square without 14 small discs ``(cx, cy, r)`` (radii 0.015 to 0.025, each
#: more than 0.05 from the boundary and the others): features below one cell of a 32 x 32 grid
#: (spacing 1/31). The meshes grade from edges of ``PORES_NEAR`` at the pores to ``PORES_H``.
PORES = ((0.14, 0.16, 0.020), (0.38, 0.12, 0.015), (0.63, 0.18, 0.025), (0.86, 0.13, 0.018),
         (0.22, 0.40, 0.017), (0.47, 0.36, 0.022), (0.74, 0.42, 0.016), (0.90, 0.33, 0.020),
         (0.12, 0.63, 0.024), (0.36, 0.66, 0.019), (0.60, 0.60, 0.015), (0.84, 0.70, 0.023),
         (0.27, 0.88, 0.021), (0.64, 0.86, 0.018))
PORES_H, PORES_NEAR = 1 / 32, 0.008
#: ``heldout`` (a geometry used nowhere else): the quarter annulus ``HELDOUT_RADII[0] <= |x| <=
#: HELDOUT_RADII[1]``, ``x, y >= 0``, without the ellipse ``(cx, cy, a, b, angle)`` (semi-axes
#: ``a >= b``, the major axis turned by ``angle`` radians from the x axis).
HELDOUT_RADII = (0.35, 1.0)
HELDOUT_ELLIPSE = (0.62, 0.45, 0.12, 0.06, np.pi / 6)
HELDOUT_H = 0.03
#: Longest chord of the polygons that stand for the curved boundaries in every mesh of the domain
#: (the tests check it): :func:`inside` counts points within twice its sagitta as inside.
CHORDS = {"holes": HOLES_H, "square_holes": 1.3 * SQUARE_HOLES_H, "pores": 0.012, "heldout": 1.3 * HELDOUT_H}
#: ``cube``: the unit cube's tetrahedral meshes (the race's 3-D family); the coefficient field's
#: cosine modes per axis there (the 2-D domains keep the ``"cao"`` preset's 32).
CUBE_MODES = 12
#: Isometries that leave each domain, the Darcy problem (source 1, zero boundary values) and the
#: coefficient law on the domain's bounding box invariant (the holed disk has none but the identity).
SYMMETRIES = {"square": dihedral(4, (0.5, 0.5)), "lshape": dihedral(1, (0.0, 0.0), -np.pi / 4)}


def jitter(mesh, amplitude: float = 0.25, seed: int = 0):
    """A copy of a triangle or tetrahedron mesh with every interior node moved by up to
    ``amplitude`` times its shortest incident edge per coordinate (boundary nodes stay, so the
    domain is unchanged); the amplitude is halved until every cell keeps its orientation."""
    m = families.to_skfem(mesh)
    p, t = m.p.T.copy(), m.t.T
    edges = np.concatenate([t[:, [i, j]] for i in range(t.shape[1]) for j in range(i + 1, t.shape[1])])
    length = np.linalg.norm(p[edges[:, 0]] - p[edges[:, 1]], axis=1)
    h = np.full(len(p), np.inf)
    np.minimum.at(h, edges[:, 0], length)
    np.minimum.at(h, edges[:, 1], length)
    move = np.random.default_rng(seed).uniform(-1, 1, p.shape) * h[:, None]
    move[m.boundary_nodes()] = 0.0

    def volumes(q):  # signed areas (volumes) of the cells, up to a factor
        return np.linalg.det(q[t[:, 1:]] - q[t[:, :1]])

    sign = np.sign(volumes(p))
    while amplitude > 1e-3 and np.any(np.sign(volumes(p + amplitude * move)) != sign):
        amplitude /= 2
    return _simplices(p + amplitude * move, t)


def _simplices(points: np.ndarray, cells: np.ndarray):
    """The triangle (2-D points) or tetrahedron (3-D) mesh of ``points`` and ``cells``."""
    import skfem

    cls = skfem.MeshTri1 if points.shape[1] == 2 else skfem.MeshTet1
    return families.from_skfem(cls(np.ascontiguousarray(points.T), np.ascontiguousarray(cells.T)))


def _gmsh(name: str, geometry, h: float, size=None, algorithm: int = 6):
    """The triangle mesh gmsh makes of the surface ``geometry(occ)`` builds: edge lengths up to
    ``h``, and up to ``size(x, y)`` where given (then only that and ``h`` set the sizes); mesher
    ``algorithm`` (6 Frontal-Delaunay, 5 Delaunay, 1 MeshAdapt). One thread and a fixed seed:
    the same nodes on every call (kept in :func:`cached_mesh`'s folder when one is named)."""
    def build(occ):
        import gmsh

        geometry(occ)
        occ.synchronize()
        gmsh.option.setNumber("General.NumThreads", 1)
        gmsh.option.setNumber("Mesh.RandomSeed", 1)
        gmsh.option.setNumber("Mesh.Algorithm", algorithm)
        if size is not None:
            for option in ("MeshSizeExtendFromBoundary", "MeshSizeFromPoints", "MeshSizeFromCurvature"):
                gmsh.option.setNumber(f"Mesh.{option}", 0)
            gmsh.model.mesh.setSizeCallback(lambda dim, tag, x, y, z, lc: min(lc, size(x, y)))

    return cached_mesh(name, lambda: families._gmsh_triangles(name, build, h))


def cached_mesh(name: str, make):
    """The triangle mesh ``make()`` gives, as :func:`_simplices`; with the environment variable
    ``DARCY_MESH_CACHE`` naming a folder, read from ``name.npz`` there when present and written
    there when made (for machines without gmsh: fill the folder where gmsh is, carry it over)."""
    cache = os.environ.get("DARCY_MESH_CACHE")
    path = Path(cache) / f"{name}.npz" if cache else None
    if path is not None and path.exists():
        saved = np.load(path)
        return _simplices(saved["points"], saved["cells"])
    mesh = make()
    points, cells = mesh.points[:, :2], mesh.cells_dict["triangle"]
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        np.savez(path, points=points, cells=cells)
    return _simplices(points, cells)


def _square_without(discs):
    def geometry(occ):
        square = occ.addRectangle(0, 0, 0, 1, 1)
        occ.cut([(2, square)], [(2, occ.addDisk(cx, cy, 0, r, r)) for cx, cy, r in discs])

    return geometry


def _to_discs(discs, x, y) -> float:
    """Distance from ``(x, y)`` to the nearest circle of ``discs``."""
    return min(abs(np.hypot(x - cx, y - cy) - r) for cx, cy, r in discs)


def _to_ellipse(x, y) -> float:
    """About the distance from ``(x, y)`` to the ellipse of ``heldout`` (a size function only)."""
    cx, cy, a, b, angle = HELDOUT_ELLIPSE
    u = (x - cx) * np.cos(angle) + (y - cy) * np.sin(angle)
    v = -(x - cx) * np.sin(angle) + (y - cy) * np.cos(angle)
    return b * abs(np.hypot(u / a, v / b) - 1)


def _heldout(occ):
    r0, r1 = HELDOUT_RADII
    cx, cy, a, b, angle = HELDOUT_ELLIPSE
    ring, _ = occ.cut([(2, occ.addDisk(0, 0, 0, r1, r1))], [(2, occ.addDisk(0, 0, 0, r0, r0))])
    quarter, _ = occ.intersect(ring, [(2, occ.addRectangle(0, 0, 0, r1, r1))])
    ellipse = occ.addDisk(cx, cy, 0, a, b)
    occ.rotate([(2, ellipse)], cx, cy, 0, 0, 0, 1, angle)
    occ.cut(quarter, [(2, ellipse)])


def _fixed_meshes(domain: str) -> dict[str, object]:
    """The four meshes of a fixed-size gmsh domain (``square_holes``, ``pores``, ``heldout``)."""
    if domain == "square_holes":
        train = cached_mesh("square_holes", lambda: families.square_with_holes(SQUARE_HOLES, SQUARE_HOLES_H))
        graded = _gmsh("square_holes_graded", _square_without(SQUARE_HOLES), 0.07,
                       lambda x, y: 0.01 + 0.25 * _to_discs(SQUARE_HOLES, x, y))
        foreign = _gmsh("square_holes_foreign", _square_without(SQUARE_HOLES), SQUARE_HOLES_H / 1.2,
                        algorithm=5)
    elif domain == "pores":
        def near(x, y):
            return PORES_NEAR + 0.8 * _to_discs(PORES, x, y)

        train = _gmsh("pores", _square_without(PORES), PORES_H, near)
        graded = _gmsh("pores_graded", _square_without(PORES), 0.07,
                       lambda x, y: min(near(x, y), 0.018 + 0.045 * x))
        foreign = _gmsh("pores_foreign", _square_without(PORES), PORES_H / 1.25,
                        lambda x, y: PORES_NEAR / 1.25 + 0.65 * _to_discs(PORES, x, y), algorithm=5)
    elif domain == "heldout":
        train = _gmsh("heldout", _heldout, HELDOUT_H)
        graded = _gmsh("heldout_graded", _heldout, 0.07,  # the ellipse kept at the training size
                       lambda x, y: min(0.008 + 0.1 * (np.hypot(x, y) - HELDOUT_RADII[0]),
                                        HELDOUT_H + _to_ellipse(x, y)))
        foreign = _gmsh("heldout_foreign", _heldout, HELDOUT_H / 1.18, algorithm=5)
    else:
        raise ValueError(f"domain must be one of {DOMAINS}, got {domain!r}")
    return {"train": train, "refined": families.refine(train, 1), "graded": graded, "foreign": foreign}


def graded_cube(n: int):
    """The structured tetrahedral ``n x n x n`` cube mapped by ``(x, y, z) -> (x^2, y^2, z^2)``:
    cells ``n^-2`` wide at the origin, ``2 / n`` at the far corner."""
    import skfem

    x = np.linspace(0.0, 1.0, n + 1) ** 2
    return families.from_skfem(skfem.MeshTet1.init_tensor(x, x, x))


def graded_square(n: int):
    """The structured ``n x n`` square mapped by ``(x, y) -> (x^p, y^p)``: ``p = 3``
    (:data:`geoattn.mesh.families.GRADING`) up to ``n = 16``, ``p = 2`` above, where the cubic
    map's first cells (``n^-3`` wide: 3e-5 at ``n = 32``) would be finer than float32 coordinates
    resolve next to 1."""
    if n <= 16:
        return families.unit_square(n, "graded")
    x = np.linspace(0.0, 1.0, n + 1) ** 2
    import skfem

    return families.from_skfem(skfem.MeshTri1.init_tensor(x, x))


def benchmark_meshes(n: int, domain: str = "square") -> dict[str, object]:
    """Meshes of one domain carrying the test samples; ``"train"`` is the training mesh.

    ``square``: the irregular training mesh, its uniform refinement, a graded mesh and a foreign
    irregular mesh; ``lshape``: a jittered mesh with ``n`` cells per unit, its refinement, the
    structured mesh and a jittered one with ``1.5 n``; ``holes``: ``meshes/disk_two_holes.msh``
    (fixed size, ``n`` is ignored), its refinement and a perturbed copy.

    The fixed-size gmsh domains (``n`` is ignored; every call gives the same nodes) have the
    training mesh, its refinement, a ``"graded"`` mesh of about the training mesh's nodes and a
    ``"foreign"`` one of another mesher (Delaunay instead of Frontal-Delaunay) with about 1.5 times
    them: ``square_holes`` (:data:`SQUARE_HOLES`, about 1000 training nodes; graded: fine at the
    holes), ``pores`` (:data:`PORES`, about 1800 training nodes, every mesh fine at the pores;
    graded: also fine toward ``x = 0``) and ``heldout`` (the quarter annulus with an elliptic hole
    of :data:`HELDOUT_RADII`, :data:`HELDOUT_ELLIPSE`, about 1000 training nodes; graded: fine at
    the inner arc).

    ``random_holes`` (:data:`PER_SAMPLE`: every sample on a domain and meshes of its own, see
    :mod:`darcy.random_holes`): the meshes of the first sample's domain, ``"train"`` with the
    square's ``(n + 1)^2`` nodes and ``"finer"``; they size the models.

    ``cube`` (3-D): the structured tetrahedral mesh of the unit cube with ``n`` cells per side,
    its interior nodes jittered (``(n + 1)^3`` nodes), its uniform refinement (8 times the
    cells), the structured mesh graded toward the origin (:func:`graded_cube`) and a jittered
    mesh with ``1.5 n`` cells per side."""
    if domain == "square":
        train = families.unit_square(n, "irregular", seed=0)
        return {"train": train, "refined": families.refine(train, 1),
                "graded": graded_square(n),
                "foreign": families.unit_square(round(1.5 * n), "irregular", seed=1)}
    if domain == "lshape":
        train = jitter(families.l_shape(n), seed=0)
        return {"train": train, "refined": families.refine(train, 1),
                "structured": families.l_shape(n),
                "foreign": jitter(families.l_shape(round(1.5 * n)), seed=1)}
    if domain == "holes":
        import meshio

        with contextlib.redirect_stdout(io.StringIO()):  # meshio's gmsh reader prints a blank line
            train = meshio.read(HOLES_MESH)
        train = _simplices(train.points[:, :2], train.cells_dict["triangle"])
        return {"train": train, "refined": families.refine(train, 1), "perturbed": jitter(train, seed=1)}
    if domain in ("square_holes", "pores", "heldout"):
        return _fixed_meshes(domain)
    if domain == "random_holes":
        from .random_holes import example_meshes

        return example_meshes((n + 1) ** 2)
    if domain == "cube":
        train = jitter(families.unit_cube(n), seed=0)
        return {"train": train, "refined": families.refine(train, 1), "graded": graded_cube(n),
                "foreign": jitter(families.unit_cube(round(1.5 * n)), seed=1)}
    raise ValueError(f"domain must be one of {DOMAINS}, got {domain!r}")


def mesh_dim(mesh) -> int:
    """The dimension of a benchmark mesh's cells: 3 for tetrahedra, else 2 (2-D meshes may carry
    a zero z column)."""
    return 3 if "tetra" in mesh.cells_dict else 2


def domain_dim(domain: str) -> int:
    """The dimension of a domain of :data:`DOMAINS`."""
    return 3 if domain == "cube" else 2


def cell_size(n: int, domain: str = "square") -> float:
    """Typical edge length of the training mesh of :func:`benchmark_meshes` (``n`` is ignored for the
    fixed-size domains; ``pores``: the size away from the pores)."""
    fixed = {"holes": HOLES_H, "square_holes": SQUARE_HOLES_H, "pores": PORES_H, "heldout": HELDOUT_H}
    return fixed.get(domain, 1.0 / n)


def inside(domain: str, points: np.ndarray) -> np.ndarray:
    """Which points ``[G, 2]`` lie in the (closed) domain."""
    x, y, tol = points[:, 0], points[:, 1], 1e-9
    if domain in ("square", "cube"):
        return np.ones(len(points), dtype=bool)
    if domain == "lshape":
        return ~((x > tol) & (y < -tol))
    if domain in ("holes", "square_holes", "pores"):
        if domain == "holes":
            keep, discs = x**2 + y**2 <= (families.DISK_RADIUS + tol) ** 2, families.DISK_HOLES
        else:
            keep = (x >= -tol) & (x <= 1 + tol) & (y >= -tol) & (y <= 1 + tol)
            discs = SQUARE_HOLES if domain == "square_holes" else PORES
        for cx, cy, r in discs:  # the meshes' holes are polygons inscribed in the circles: points
            sag = CHORDS[domain] ** 2 / (4 * r)  # within twice the chords' sagitta count as inside
            keep &= (x - cx) ** 2 + (y - cy) ** 2 >= (r - sag) ** 2
        return keep
    if domain == "heldout":
        (r0, r1), (cx, cy, a, b, angle) = HELDOUT_RADII, HELDOUT_ELLIPSE
        r = np.hypot(x, y)
        keep = (x >= -tol) & (y >= -tol) & (r <= r1 + tol) & (r >= r0 - CHORDS[domain] ** 2 / (4 * r0))
        # the polygon inscribed in the ellipse lies within twice the sagitta d of its chords (at
        # the ellipse's smallest radius of curvature b^2 / a) of the curve, and the ellipse with
        # semi-axes a - d, b - d lies at least d inside it (compare the support functions)
        d = CHORDS[domain] ** 2 * a / (4 * b**2)
        u = (x - cx) * np.cos(angle) + (y - cy) * np.sin(angle)
        v = -(x - cx) * np.sin(angle) + (y - cy) * np.cos(angle)
        return keep & ((u / (a - d)) ** 2 + (v / (b - d)) ** 2 >= 1)
    raise ValueError(f"domain must be one of {DOMAINS}, got {domain!r}")


def solve_samples(meshes: dict, n: int, seed: int, family: str, field, start: int = 0, workers: int = 1) -> dict:
    """:func:`geoattn.data.darcy.darcy_samples` of samples ``start .. start + n - 1``, solved by
    ``workers`` processes on contiguous chunks of the indices: sample ``i`` depends only on
    ``(seed, i)``, so the result is the same for every ``workers``. The processes send back the
    nodal values alone; the samples are built here, on the meshes' shared node data."""
    workers = max(1, min(workers, n))
    if workers == 1:
        return darcy_samples(meshes, n, seed, family, field, start=start)
    bounds = np.linspace(start, start + n, workers + 1).round().astype(int)
    # fresh processes with one thread each: the BLAS and OpenMP pools a process starts with would
    # otherwise each take every core (and gain almost nothing on these small solves)
    saved = {k: os.environ.get(k) for k in _ONE_THREAD}
    os.environ.update(_ONE_THREAD)
    try:
        with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn")) as pool:
            parts = list(pool.map(_solve_chunk, [(meshes, seed, family, field, int(a), int(b))
                                                 for a, b in zip(bounds[:-1], bounds[1:])]))
    finally:
        for k, v in saved.items():
            os.environ.pop(k) if v is None else os.environ.__setitem__(k, v)
    bases = {name: from_meshio(mesh) for name, mesh in meshes.items()}
    return {name: [sample_data(bases[name], *values[name]) for part in parts for values in part]
            for name in meshes}


_ONE_THREAD = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def _solve_chunk(job) -> list[dict]:
    """The nodal values ``{mesh: (a, u)}`` of samples ``lo .. hi - 1``."""
    meshes, seed, family, field, lo, hi = job
    problems = {name: DarcyProblem(mesh) for name, mesh in meshes.items()}
    return [solve_sample(problems, field, seed, i, family) for i in range(lo, hi)]


def coefficient_field(meshes: dict):
    """The coefficient field preset on the bounding box of all the domain's meshes (in 3-D with
    :data:`CUBE_MODES` modes per axis)."""
    dim = mesh_dim(next(iter(meshes.values())))
    points = np.concatenate([m.points[:, :dim] for m in meshes.values()])
    return preset("cao", box=(points.min(0), points.max(0)), **({"modes": CUBE_MODES} if dim == 3 else {}))


def reference_targets(meshes: dict, scale: Scale, family: str, field, seed: int = 0) -> dict[str, list]:
    """The test samples of every mesh, with targets from the solution on the training mesh
    refined twice, interpolated linearly to the mesh's nodes, instead of the mesh's own P1
    solution: a model scored against them is scored against (nearly) the continuum solution,
    the same function on every mesh."""
    test = solve_samples({**meshes, "reference": families.refine(meshes["train"], 2)}, scale.n_test, seed,
                   family, field, start=scale.n_train, workers=scale.data_workers)
    reference = test.pop("reference")
    out = {}
    for name, samples in test.items():
        out[name] = []
        stencil = linear_interpolation(reference[0].pos, samples[0].pos)  # one mesh pair: built once
        for d, r in zip(samples, reference):
            e = d.clone()
            e.y = stencil(r.y.double()).to(d.y.dtype)
            out[name].append(e)
    return out


def fem_floor(scale: Scale, family: str, domain: str = "square", seed: int = 0) -> dict[str, float]:
    """How far each mesh's own test targets (its P1 finite-element solutions) are from the
    solutions on the training mesh refined twice (:func:`reference_targets`): the mean weighted
    relative L2 difference at the mesh's nodes. A model scored on a mesh against its own targets
    cannot be told apart from this discretisation error below it."""
    meshes = benchmark_meshes(scale.mesh_n, domain)
    field = coefficient_field(meshes)
    own = solve_samples(meshes, scale.n_test, seed, family, field, start=scale.n_train, workers=scale.data_workers)
    floor = {}
    for name, samples in reference_targets(meshes, scale, family, field, seed).items():
        errors = []
        for d, r in zip(own[name], samples):
            w, u = d.weight.double()[:, None], r.y.double()
            errors.append(float(torch.sqrt((w * (d.y.double() - u) ** 2).sum() / (w * u ** 2).sum())))
        floor[name] = float(np.mean(errors))
    return floor
