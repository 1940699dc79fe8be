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


DOMAINS = ("square", "lshape", "holes")
HOLES_MESH = Path(__file__).resolve().parents[2] / "meshes" / "disk_two_holes.msh"
HOLES_H = 0.08  # target edge length of ``HOLES_MESH`` (meshes/generate.py)
#: Isometries that leave each domain, the Darcy problem (source 1, zero boundary values) and the
#: coefficient law on the domain's bounding box invariant (the holed disk has none but the identity).
SYMMETRIES = {"square": dihedral(4, (0.5, 0.5)), "lshape": dihedral(1, (0.0, 0.0), -np.pi / 4)}


def jitter(mesh, amplitude: float = 0.25, seed: int = 0):
    """A copy of a triangle mesh with every interior node moved by up to ``amplitude`` times its
    shortest incident edge per coordinate (boundary nodes stay, so the domain is unchanged); the
    amplitude is halved until every cell keeps its orientation."""
    m = families.to_skfem(mesh)
    p, t = m.p.T.copy(), m.t.T
    edges = np.concatenate([t[:, [0, 1]], t[:, [1, 2]], t[:, [2, 0]]])
    length = np.linalg.norm(p[edges[:, 0]] - p[edges[:, 1]], axis=1)
    h = np.full(len(p), np.inf)
    np.minimum.at(h, edges[:, 0], length)
    np.minimum.at(h, edges[:, 1], length)
    move = np.random.default_rng(seed).uniform(-1, 1, p.shape) * h[:, None]
    move[m.boundary_nodes()] = 0.0

    def areas(q):
        a, b, c = q[t[:, 0]], q[t[:, 1]], q[t[:, 2]]
        return (b - a)[:, 0] * (c - a)[:, 1] - (b - a)[:, 1] * (c - a)[:, 0]

    sign = np.sign(areas(p))
    while amplitude > 1e-3 and np.any(np.sign(areas(p + amplitude * move)) != sign):
        amplitude /= 2
    return _triangles(p + amplitude * move, t)


def _triangles(points: np.ndarray, cells: np.ndarray):
    import skfem

    return families.from_skfem(skfem.MeshTri1(np.ascontiguousarray(points.T), np.ascontiguousarray(cells.T)))


def benchmark_meshes(n: int, domain: str = "square") -> dict[str, object]:
    """Meshes of one domain carrying the test samples; ``"train"`` is the training mesh.

    ``square``: the irregular training mesh, its uniform refinement, a graded mesh and a foreign
    irregular mesh; ``lshape``: a jittered mesh with ``n`` cells per unit, its refinement, the
    structured mesh and a jittered one with ``1.5 n``; ``holes``: ``meshes/disk_two_holes.msh``
    (fixed size, ``n`` is ignored), its refinement and a perturbed copy."""
    if domain == "square":
        train = families.unit_square(n, "irregular", seed=0)
        return {"train": train, "refined": families.refine(train, 1),
                "graded": families.unit_square(n, "graded"),
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
        train = _triangles(train.points[:, :2], train.cells_dict["triangle"])
        return {"train": train, "refined": families.refine(train, 1), "perturbed": jitter(train, seed=1)}
    raise ValueError(f"domain must be one of {DOMAINS}, got {domain!r}")


def cell_size(n: int, domain: str = "square") -> float:
    """Typical edge length of the training mesh of :func:`benchmark_meshes`."""
    return HOLES_H if domain == "holes" else 1.0 / n


def inside(domain: str, points: np.ndarray) -> np.ndarray:
    """Which points ``[G, 2]`` lie in the (closed) domain."""
    x, y, tol = points[:, 0], points[:, 1], 1e-9
    if domain == "square":
        return np.ones(len(points), dtype=bool)
    if domain == "lshape":
        return ~((x > tol) & (y < -tol))
    if domain == "holes":
        keep = x**2 + y**2 <= (families.DISK_RADIUS + tol) ** 2
        for cx, cy, r in families.DISK_HOLES:  # the meshes' holes are polygons inscribed in
            sag = HOLES_H**2 / (4 * r)  # the circles: points within twice the chords' sagitta count as inside
            keep &= (x - cx) ** 2 + (y - cy) ** 2 >= (r - sag) ** 2
        return keep
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
    """The coefficient field preset on the bounding box of all the domain's meshes."""
    points = np.concatenate([m.points[:, :2] for m in meshes.values()])
    return preset("cao", box=(points.min(0), points.max(0)))


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
