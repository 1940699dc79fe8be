"""The fixed-size gmsh domains of the Darcy race (``benchmarks/darcy/meshes.py``): ``square_holes``,
``pores`` and ``heldout``."""

import importlib

import numpy as np
import pytest

from geoattn.mesh import families

pytest.importorskip("gmsh")  # the meshgen extra (installed with the test extra)

SCRIPT = "darcy_compare"  # the ``script`` fixture (conftest.py) puts benchmarks/ on sys.path


@pytest.fixture(scope="module")
def meshes(script):
    return importlib.import_module("darcy.meshes")


#: Node counts (lowest, highest) of the train, graded and foreign meshes.
NODES = {"square_holes": {"train": (900, 1100), "graded": (800, 1300), "foreign": (1350, 1650)},
         "pores": {"train": (1600, 2000), "graded": (1400, 2200), "foreign": (2400, 3000)},
         "heldout": {"train": (900, 1100), "graded": (800, 1300), "foreign": (1350, 1650)}}


def _curves(meshes, domain):
    """Level functions (zero on the curve), smallest and largest radii of curvature of the
    domain's curved boundaries, and whether the domain lies outside the curve (then its polygon
    cuts into the curve's inside, which :func:`inside` allows for), and the domain's analytic
    area (curves as drawn, not as polygons)."""
    def circle(cx, cy, r, hole=True):
        return lambda p: np.hypot(p[:, 0] - cx, p[:, 1] - cy) - r, r, r, hole

    if domain in ("square_holes", "pores"):
        discs = meshes.SQUARE_HOLES if domain == "square_holes" else meshes.PORES
        return [circle(*d) for d in discs], 1 - sum(np.pi * r**2 for _, _, r in discs)
    (r0, r1), (cx, cy, a, b, t) = meshes.HELDOUT_RADII, meshes.HELDOUT_ELLIPSE

    def ellipse(p):
        u = (p[:, 0] - cx) * np.cos(t) + (p[:, 1] - cy) * np.sin(t)
        v = -(p[:, 0] - cx) * np.sin(t) + (p[:, 1] - cy) * np.cos(t)
        return np.hypot(u / a, v / b) - 1

    # the outer arc's length (pi/2) enters the area bound; the ellipse's perimeter is < 2 pi a
    arcs = [circle(0, 0, r0), circle(0, 0, r1, hole=False), (ellipse, b**2 / a, a, True)]
    return arcs, np.pi / 4 * (r1**2 - r0**2) - np.pi * a * b


@pytest.fixture(scope="module", params=["square_holes", "pores", "heldout"])
def domain(request, meshes):
    return request.param, meshes.benchmark_meshes(4, request.param)


def test_four_meshes_of_the_stated_sizes(meshes, domain):
    name, built = domain
    assert list(built) == ["train", "refined", "graded", "foreign"]
    n = {k: len(m.points) for k, m in built.items()}
    for k, (lo, hi) in NODES[name].items():
        assert lo <= n[k] <= hi, (k, n)
    assert n["foreign"] == pytest.approx(1.5 * n["train"], rel=0.1)
    refined = families.to_skfem(built["train"]).refined()
    np.testing.assert_array_equal(built["refined"].points[:, :2], refined.p.T)
    assert meshes.benchmark_meshes(99, name)["train"].points.shape == built["train"].points.shape  # n ignored
    # the training mesh's median edge is its cell size (pores: the size away from the pores)
    m = families.to_skfem(built["train"])
    edges = np.linalg.norm(m.p[:, m.facets[0]] - m.p[:, m.facets[1]], axis=0)
    assert 0.8 < np.median(edges) / meshes.cell_size(4, name) < 1.1
    for mesh in built.values():
        assert [c.type for c in mesh.cells] == ["triangle"] and mesh.points.shape[1] == 2


def test_cells_oriented_and_area_is_the_domains(meshes, domain):
    name, built = domain
    curves, area = _curves(meshes, name)
    for key, mesh in built.items():
        p, t = mesh.points[:, :2], mesh.cells_dict["triangle"]
        a, b, c = p[t[:, 0]], p[t[:, 1]], p[t[:, 2]]
        cross = (b - a)[:, 0] * (c - a)[:, 1] - (b - a)[:, 1] * (c - a)[:, 0]
        assert cross.min() > 0, key
        # The curves are polygons with nodes on them: each chord of length c cuts off (or adds) a
        # segment, inside the c x s rectangle of its sagitta s = rho - (rho^2 - c^2 / 4)^(1/2)
        # (about c^2 / (8 rho), rho the radius of curvature), so the mesh's area differs from the
        # curved domain's by at most the largest sagitta times the curve's length (< 2 pi times
        # its largest radius; the segments are about 2/3 of the rectangles); the refined mesh has
        # the training mesh's polygons. The bound is about 1e-3.
        m = families.to_skfem(built["train" if key == "refined" else key])
        q, f = m.p.T, m.facets[:, m.boundary_facets()].T
        bound = 0.0
        for level, rho, radius, hole in curves:
            on = np.abs(level(q)) < 1e-6
            chords = f[on[f[:, 0]] & on[f[:, 1]]]
            c = np.linalg.norm(q[chords[:, 0]] - q[chords[:, 1]], axis=1).max()
            assert c <= meshes.CHORDS[name] or not hole, (key, c)  # what inside() assumes
            bound += (rho - np.sqrt(rho**2 - c**2 / 4)) * 2 * np.pi * radius
        assert abs(0.5 * cross.sum() - area) <= bound, (key, 0.5 * cross.sum() - area, bound)
        if name != "heldout":  # only holes: their polygons are smaller than the discs
            assert 0.5 * cross.sum() > area


def test_inside_covers_the_nodes_and_not_the_holes(meshes, domain):
    name, built = domain
    for mesh in built.values():
        assert meshes.inside(name, mesh.points[:, :2]).all()
    outside = [(1.02, 0.5), (0.5, -0.02), (-0.02, 0.3), (0.5, 1.02)]
    if name == "heldout":
        cx, cy = meshes.HELDOUT_ELLIPSE[:2]
        holes = [(cx, cy), (0.1, 0.1), (0.2, 0.2), (0.75, 0.75)]  # the ellipse, the inner disc, beyond r = 1
        assert meshes.inside(name, np.array([(0.5, 0.0), (0.0, 0.7), (1.0, 0.0), (0.35, 0.0)])).all()
    else:
        holes = [(cx, cy) for cx, cy, _ in (meshes.SQUARE_HOLES if name == "square_holes" else meshes.PORES)]
        assert meshes.inside(name, np.array([(0.0, 0.0), (1.0, 1.0), (0.5, 0.0)])).all()
    assert not meshes.inside(name, np.array(holes + outside)).any()


def test_meshes_are_the_same_on_every_build(meshes, domain):
    name, built = domain
    again = meshes.benchmark_meshes(4, name)
    for key in built:
        np.testing.assert_array_equal(again[key].points, built[key].points)
        np.testing.assert_array_equal(again[key].cells_dict["triangle"], built[key].cells_dict["triangle"])


def test_pores_are_small_and_apart(meshes):
    pores = np.array(meshes.PORES)
    assert len(pores) == 14 and pores[:, 2].min() >= 0.015 and pores[:, 2].max() <= 0.025
    assert pores[:, 2].max() < 1 / 31  # radii below the spacing of the 32 x 32 grid
    gap = np.min(np.concatenate([pores[:, :2] - pores[:, 2:], 1 - pores[:, :2] - pores[:, 2:]]))
    assert gap > 0.05
    d = np.hypot(*(pores[:, None, :2] - pores[None, :, :2]).transpose(2, 0, 1)) - pores[:, 2] - pores[:, 2, None]
    assert d[~np.eye(len(pores), dtype=bool)].min() > 0.05
