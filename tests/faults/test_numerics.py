"""Numerics at the boundary: coordinates far from the origin or in tiny or huge units, dtypes that
cannot hold the weights, overlapping cells, coordinates out of float range. Each case either gives
the numbers of the same mesh at the origin in unit size, or is refused with a typed error that
names the cause and the fix; nothing is computed silently wrong."""

import math

import meshio
import numpy as np
import pytest
import torch

import geoattn
from geoattn.mesh import Mesh, families, from_meshio, quadrature_weights, read_mesh, to_meshio, validate_mesh
from geoattn.models import build_model
from geoattn.train import NormalizedOperator, Trainer, relative_l2
from geoattn.train.checkpoint import load_operator, operator_payload, save_checkpoint

OFFSETS = (0.0, 1e4, 1e6, 5e6)
SCALES = (1.0, 1e-6, 1e6)
FRAMES = [(o, s) for o in OFFSETS for s in SCALES if (o, s) != (0.0, 1.0)]
EPS64 = float(np.finfo(np.float64).eps)


def _moved(mesh: meshio.Mesh, offset: float, scale: float) -> meshio.Mesh:
    """The mesh translated by ``offset`` along every axis, then scaled by ``scale`` (float64)."""
    points = mesh.points.copy()
    points[:, :2] = (points[:, :2] + offset) * scale
    return meshio.Mesh(points, mesh.cells, point_data=dict(mesh.point_data))


def _min_edge(points: np.ndarray, triangles: np.ndarray) -> float:
    p = points[triangles]
    return float(np.linalg.norm(p - np.roll(p, 1, axis=1), axis=-1).min())


@pytest.mark.parametrize("offset,scale", FRAMES)
def test_weights_far_from_origin_and_in_any_unit_equal_the_unit_mesh_weights(offset, scale):
    mesh = families.unit_square(8, "irregular")
    points, triangles = mesh.points[:, :2], mesh.cells[-1].data
    reference = quadrature_weights(points, triangles, "triangle")
    moved = quadrature_weights(_moved(mesh, offset, scale).points[:, :2], triangles, "triangle")
    # The float64 coordinates (p + offset) * scale carry a rounding error of |offset| eps64 (in
    # mesh units) each; an edge vector then errs by twice that relative to the shortest edge
    # h_min, a triangle's area (two edges) by 4 |offset| eps64 / h_min, and a lumped weight (a sum
    # of areas) by as much; the change of frame and the scaling add a few eps64 more.
    bound = 4 * max(offset, 1.0) * EPS64 / _min_edge(points, triangles) + 8 * EPS64
    error = ((moved / scale**2 - reference).abs() / reference).max().item()
    assert error <= bound / 2, (error, bound)  # a factor-2 margin on the bound


@pytest.mark.parametrize("offset,scale", FRAMES)
def test_mesh_read_in_its_frame_gives_the_unit_mesh_positions_weights_and_prediction(offset, scale):
    mesh = families.unit_square(8)  # structured: nodes at multiples of 1/8, exact in binary
    x = np.sin(3 * mesh.points[:, :1])
    mesh.point_data["u"] = x
    reference = from_meshio(mesh, x="u")
    origin = [offset * scale] * 2
    moved = from_meshio(_moved(mesh, offset, scale), x="u", origin=origin, scale=scale)
    assert moved.frame == (tuple(origin), scale)
    # (p + offset) * scale - offset * scale, divided by scale, errs by at most |offset| eps64 (a
    # few units of 1e-10 for 5e6): below half the float32 spacing (3.7e-9 at 1/8, and exact at 0),
    # so the float32 positions are the unit mesh's bit for bit, and so are the weights from them.
    assert torch.equal(moved.pos, reference.pos)
    assert torch.equal(moved.weight, reference.weight)
    torch.manual_seed(0)
    op = NormalizedOperator(build_model("galerkin", in_channels=1, out_channels=1, dim=2, width=8, depth=1))
    assert torch.equal(op(moved.x, moved.pos, moved.weight), op(reference.x, reference.pos, reference.weight))
    # writing puts the nodes back where they were read (the inverse of the frame, in float64)
    back = to_meshio(moved).points
    moved_points = _moved(mesh, offset, scale).points[:, :2]
    assert np.abs(back - moved_points).max() <= 2 * 0.5 * (1 / 8) * scale * 2.0**-23 + 2 * abs(origin[0]) * EPS64


@pytest.mark.parametrize("offset", (1e4, 1e6, 5e6))
def test_far_from_origin_without_a_frame_is_refused_with_the_fix(offset):
    moved = _moved(families.unit_square(16), offset, 1.0)
    with pytest.raises(geoattn.CoordinateRangeError, match=r"(?s)nodes are only 0\.0625 apart.*origin=") as info:
        from_meshio(moved)
    assert f"{offset + 1:.6g}" in str(info.value)
    assert from_meshio(moved, dtype=torch.float64).pos.dtype == torch.float64  # float64 resolves them


def test_training_frame_is_kept_by_the_operator_its_checkpoint_and_prediction(tmp_path):
    offset, scale = 5e6, 1e3
    origin = [offset * scale] * 2

    def sample(mesh, k):
        data = from_meshio(_moved(mesh, offset, scale), origin=origin, scale=scale)
        data.x = torch.sin((k + 1) * data.pos[:, :1])
        data.y = data.x * (1 + data.pos[:, 1:])
        return data

    train = [sample(families.unit_square(4, "irregular"), k) for k in range(2)]
    torch.manual_seed(0)
    op = NormalizedOperator(build_model("tno", in_channels=1, out_channels=1, width=8, depth=1))
    Trainer(op, epochs=1, batch_size=2, progress=False).fit(train)
    assert op.frame == {"origin": origin, "scale": scale}
    save_checkpoint(tmp_path / "op.pt", operator_payload(op))
    loaded = load_operator(tmp_path / "op.pt")
    assert loaded.frame == op.frame
    # a mesh read with the operator's frame is where the training meshes were
    fine = from_meshio(_moved(families.unit_square(6), offset, scale), **loaded.frame)
    assert float(fine.pos.min()) == 0.0 and float(fine.pos.max()) == 1.0
    # a sample read in another frame is refused before training, naming the sample
    other = sample(families.unit_square(4, "irregular"), 2)
    other.frame = ((0.0, 0.0), scale)
    with pytest.raises(geoattn.FrameError, match="training sample 1: .*same origin= and scale="):
        Trainer(op, epochs=1, progress=False).fit([train[0], other])


def test_checkpoint_from_before_frames_loads_without_one(tmp_path):
    op = NormalizedOperator(build_model("tno", in_channels=1, out_channels=1, width=8, depth=1))
    payload = operator_payload(op)
    payload["state_dict"] = {k: v for k, v in payload["state_dict"].items() if not k.endswith("frame_bits")}
    save_checkpoint(tmp_path / "old.pt", payload)
    assert load_operator(tmp_path / "old.pt").frame == {}


@pytest.mark.parametrize("dtype", (torch.float16, torch.bfloat16))
def test_half_precision_read_is_refused_with_the_reason(dtype):
    with pytest.raises(geoattn.MeshError, match=f"{dtype}.*float32 or float64"):
        read_mesh(geoattn.mesh.io.Path(__file__).parents[2] / "meshes" / "square_structured.vtu", dtype=dtype)


def test_weights_that_underflow_a_dtype_are_refused_not_zeroed():
    mesh = families.unit_square(4)
    tiny = meshio.Mesh(mesh.points * 1e-4, mesh.cells)  # weights near 1e-10: below float16's range
    weight = quadrature_weights(tiny.points[:, :2], tiny.cells[-1].data, "triangle")
    assert weight.min() > 0
    with pytest.raises(geoattn.WeightError, match=r"underflow to zero in torch\.float16.*too small"):
        quadrature_weights(torch.as_tensor(tiny.points[:, :2], dtype=torch.float16), tiny.cells[-1].data, "triangle")


@pytest.mark.parametrize("size,error,words", [
    (1e30, geoattn.WeightError, "overflow to infinity in torch.float32.*too large.*Rescale"),
    (1e39, geoattn.CoordinateRangeError, "out of the range of torch.float32.*too large.*scale="),
    (1e300, geoattn.CoordinateRangeError, "overflows float64.*too large, rescale"),
    (1e-30, geoattn.WeightError, "underflow to zero in torch.float32.*too small.*Rescale"),
    (1e-300, geoattn.CoordinateRangeError, "below the range of torch.float32.*too small"),
])
def test_coordinates_out_of_float_range_say_so(size, error, words):
    mesh = families.unit_square(4)
    huge = meshio.Mesh(mesh.points * size, mesh.cells)
    with pytest.raises(error, match=f"(?s){words}"):
        from_meshio(huge)
    data = from_meshio(huge, scale=size)  # the fix the message names
    assert abs(float(data.weight.sum()) - 1.0) <= 2 * 32 * 2.0**-23  # 25 float32 weights summed


@pytest.mark.parametrize("scale", (1e-8, 1e8))
def test_relative_error_does_not_depend_on_the_mesh_units(scale):
    data = from_meshio(meshio.Mesh(families.unit_square(8).points * scale, families.unit_square(8).cells),
                       dtype=torch.float64)
    y = torch.cos(2 * data.pos[:, :1] / scale)
    # a 10 % error is 10 % in any unit: the ratio is of two quadratures with the same weights
    assert relative_l2(1.1 * y, y, Mesh.from_sample(data)).item() == pytest.approx(0.1, rel=4 * EPS64)


OVERLAPS = {
    # a unit square's two triangles and a third on top of them: total cell measure 1.5
    "cell laid over two": (np.array([[0, 0], [1, 0], [1, 1], [0, 1.]]),
                           np.array([[0, 1, 2], [0, 2, 3], [0, 1, 3]]), "cell 2 overlaps cell 0"),
    "three cells on an edge": (np.array([[0, 0], [1, 0], [0.5, 1], [0.5, -1], [0.3, 0.5]]),
                               np.array([[0, 1, 2], [1, 0, 3], [0, 1, 4]]), "cell 2 overlaps cells 0 and 1"),
    "folded quad": (np.array([[0, 0], [1, 0], [1, 1], [0, 1], [0.2, 0.2], [0.8, 0.2]]),
                    np.array([[0, 1, 2, 3], [0, 1, 5, 4]]), "cell 1 overlaps cell 0"),
}


@pytest.mark.parametrize("name", OVERLAPS)
def test_overlapping_cells_are_refused_naming_the_first(name):
    pos, cells, words = OVERLAPS[name]
    with pytest.raises(geoattn.OverlappingCellsError, match=words):
        validate_mesh(pos, cells)
    with pytest.raises(geoattn.OverlappingCellsError, match=words):
        from_meshio(meshio.Mesh(pos, [("quad" if cells.shape[1] == 4 else "triangle", cells)]))


def test_overlapping_tetrahedra_are_refused():
    pos = np.array([[0, 0, 0], [1, 0, 0], [0, 1, 0], [0, 0, 1], [0.2, 0.2, 0.5]])
    with pytest.raises(geoattn.OverlappingCellsError, match="cell 1 overlaps cell 0"):
        validate_mesh(pos, np.array([[0, 1, 2, 3], [0, 1, 2, 4]]))


@pytest.mark.parametrize("make", [
    lambda: families.interval(16), lambda: families.interval(16, "irregular"),
    lambda: families.unit_square(6), lambda: families.unit_square(6, "irregular"),
    lambda: families.unit_square(6, "graded"), lambda: families.unit_square(6, cell="quad"),
    lambda: families.unit_square(6, "graded", cell="quad"), lambda: families.l_shape(4),
    lambda: families.unit_cube(3), lambda: families.unit_cube(3, "hexahedron"),
    lambda: families.refine(families.unit_square(4, "irregular"), 2),
])
def test_every_mesh_family_still_validates(make):
    from_meshio(make())


def test_every_sample_mesh_still_validates():
    folder = geoattn.mesh.io.Path(__file__).parents[2] / "meshes"
    files = sorted([*folder.glob("*.vtu"), *folder.glob("*.msh")])
    assert len(files) >= 10
    for path in files:
        data = read_mesh(path)
        assert math.isfinite(float(data.weight.sum()))
