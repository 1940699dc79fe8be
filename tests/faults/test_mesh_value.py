"""Nothing silently wrong in the ``Mesh`` value: a mesh checks itself when it is made (devices, one
floating dtype, cells of integer indices in range and not degenerate, a sorted non-negative batch
vector) and when batched (one dimension, device and dtype), each with a typed error naming the
cause and the fix; an in-place change of its tensors resets its checks and its derived structure;
``period=`` takes every real number type and refuses what is not a period."""

import numpy as np
import pytest
import torch

from geoattn.errors import (
    BatchOrderError,
    CellIndexError,
    ConfigError,
    DegenerateCellError,
    DeviceError,
    DimensionError,
    DTypeError,
    FieldLengthError,
    NonFiniteError,
    WeightError,
)
from geoattn.mesh import Mesh
from geoattn.models import build_model


def _square(n: int = 17):
    """The unit square, ``n x n`` nodes, two triangles per square, uniform-ish weights."""
    t = torch.linspace(0, 1, n, dtype=torch.float64)
    pos = torch.cartesian_prod(t, t)
    k = torch.arange(n - 1)
    a = (k[:, None] * n + k[None, :]).reshape(-1)
    cells = torch.cat([torch.stack([a, a + n, a + n + 1], 1), torch.stack([a, a + n + 1, a + 1], 1)])
    return pos, torch.full((n * n,), 1.0 / (n * n), dtype=torch.float64), cells


POS, WEIGHT, CELLS = _square()
N = len(POS)
SORTED = torch.cat([torch.zeros(100), torch.ones(N - 100)]).long()

BAD = [
    ("cells past the nodes", dict(cells=CELLS + 10000), CellIndexError, f"refers to node 100\\d\\d, outside \\[0, {N}\\)"),
    ("negative cells", dict(cells=CELLS - 1), CellIndexError, "refers to node -1, outside"),
    ("float cells", dict(cells=CELLS.double()), CellIndexError, "integer node indices, got dtype torch.float64"),
    ("a zero-area cell", dict(cells=torch.cat([CELLS, torch.tensor([[0, 1, 2]])])), DegenerateCellError,
     f"cell {len(CELLS)} \\(nodes \\[0, 1, 2\\]\\) has size 0"),
    ("a repeated node", dict(cells=torch.tensor([[0, 1, 1]])), DegenerateCellError, "has size 0"),
    ("negative batch", dict(batch=SORTED - 1), FieldLengthError, "graph index -1; graph indices start at 0"),
    ("float batch", dict(batch=SORTED.float()), FieldLengthError, "integer graph indices, got dtype torch.float32"),
    ("unsorted batch", dict(batch=SORTED.flip(0)), BatchOrderError, "not sorted: node 189 has graph 0 after graph 1"),
    ("weight of another dtype", dict(weight=WEIGHT.float()), DTypeError, "weight is torch.float32 but pos is "
     "torch.float64"),
    ("integer pos", dict(pos=POS.long(), weight=WEIGHT), DTypeError, "pos must be a floating tensor"),
    ("the meta device", dict(pos=POS.to("meta"), weight=WEIGHT.to("meta")), DeviceError, "meta device"),
]


@pytest.mark.parametrize("case, change, error, match", BAD, ids=[b[0] for b in BAD])
def test_a_mesh_refuses_inconsistent_tensors_when_made(case, change, error, match):
    given = dict(pos=POS, weight=WEIGHT, cells=None, batch=None) | change
    with pytest.raises(error, match=match):
        Mesh(given["pos"], given["weight"], given["cells"], batch=given["batch"])


def test_a_degenerate_cell_is_refused_at_any_scale_and_a_good_mesh_far_away_passes():
    for scale, shift in [(1e-6, 0.0), (1e6, 0.0), (1.0, 1e5)]:
        Mesh(POS * scale + shift, WEIGHT, CELLS)  # the same mesh, in other units or far away
        flat = torch.cat([CELLS, torch.tensor([[0, 1, 2]])])  # three nodes on one line
        with pytest.raises(DegenerateCellError):
            Mesh(POS * scale + shift, WEIGHT, flat)


def test_cells_of_other_element_types_are_measured_by_their_type():
    square = torch.tensor([[0.0, 0.0], [1.0, 0.0], [1.0, 1.0], [0.0, 1.0]])
    Mesh(square, torch.full((4,), 0.25), torch.tensor([[0, 1, 2, 3]]))  # a quadrilateral
    with pytest.raises(DegenerateCellError):
        Mesh(square, torch.full((4,), 0.25), torch.tensor([[0, 1, 1, 0]]))
    cube = torch.tensor([[0.0, 0, 0], [1, 0, 0], [0, 1, 0], [0, 0, 1]])
    Mesh(cube, torch.full((4,), 0.25), torch.tensor([[0, 1, 2, 3]]))  # a tetrahedron
    flat = cube.clone()
    flat[3, 2] = 0.0
    flat[3, 0] = 1.0
    flat[3, 1] = 1.0  # four coplanar nodes: a flat tetrahedron, but a fine quadrilateral in 3-D
    Mesh(flat, torch.full((4,), 0.25), torch.tensor([[0, 1, 3, 2]]))
    with pytest.raises(DegenerateCellError):
        Mesh(flat, torch.full((4,), 0.25), torch.tensor([[0, 1, 1, 0]]))


def test_batch_refuses_meshes_of_two_dimensions_or_dtypes():
    plane, space = Mesh(POS, WEIGHT), Mesh(torch.rand(5, 3, dtype=torch.float64), torch.ones(5, dtype=torch.float64))
    with pytest.raises(DimensionError, match="different spatial dimension: mesh 0 is 2, mesh 1 is 3; batch meshes "
                                             "of one dimension"):
        Mesh.batch([plane, space])
    with pytest.raises(DTypeError, match="mesh 0 is torch.float64, mesh 1 is torch.float32"):
        Mesh.batch([plane, Mesh(POS.float(), WEIGHT.float())])
    with pytest.raises(TypeError, match="takes geoattn.mesh.Mesh objects, got Tensor"):
        Mesh.batch([plane, POS])
    batch = Mesh.batch([Mesh(POS, WEIGHT, CELLS), Mesh(POS, WEIGHT, CELLS)])
    assert batch.layout.counts == (N, N) and int(batch.cells.max()) == 2 * N - 1


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_batch_and_mesh_refuse_two_devices():
    with pytest.raises(DeviceError, match="pos on cpu, weight on cuda"):
        Mesh(POS, WEIGHT.cuda())
    with pytest.raises(DeviceError, match="different device"):
        Mesh.batch([Mesh(POS, WEIGHT), Mesh(POS.cuda(), WEIGHT.cuda())])


def test_batch_refuses_a_device_mismatch_without_a_gpu():
    with pytest.raises(DeviceError, match="pos on cpu, weight on meta"):
        Mesh(POS, WEIGHT.to("meta"))


# --- a mesh that changes under its memo ---------------------------------------------------------
def _model(name: str, **kw):
    torch.manual_seed(0)
    return build_model(name, in_channels=1, out_channels=1, width=8, depth=1, **kw).double()


def test_weights_negated_in_place_after_a_call_are_refused():
    model, mesh = _model("tno", num_heads=2), Mesh(POS.clone(), WEIGHT.clone())
    x = POS[:, :1].clone()
    model(x, mesh)
    assert mesh.checked
    mesh.weight.neg_()
    assert not mesh.checked
    with pytest.raises(WeightError, match="weight 0 is negative"):
        model(x, mesh)


def test_a_nan_written_into_pos_after_a_call_is_refused():
    model, mesh = _model("tno", num_heads=2), Mesh(POS.clone(), WEIGHT.clone())
    x = POS[:, :1].clone()
    model(x, mesh)
    mesh.pos[7, 1] = float("nan")
    with pytest.raises(NonFiniteError, match="pos is NaN or infinite at 1 of 289 nodes, the first is node 7"):
        model(x, mesh)


def test_pos_scaled_in_place_after_a_gno_call_rebuilds_the_radius_graph():
    """The answer after the change equals a fresh mesh's: the old radius graph is not reused."""
    model, mesh = _model("gno", radius=0.15), Mesh(POS.clone(), WEIGHT.clone())
    x = POS[:, :1].clone()
    before = model(x, mesh)
    assert mesh.memo
    with torch.no_grad():
        mesh.pos.mul_(1.5)
    after = model(x, mesh)
    fresh = model(x, Mesh(POS * 1.5, WEIGHT.clone()))
    assert not torch.allclose(before, after)
    torch.testing.assert_close(after, fresh, rtol=0, atol=0)


def test_cells_changed_in_place_are_checked_again():
    mesh = Mesh(POS.clone(), WEIGHT.clone(), CELLS.clone())
    mesh.structure(("anything",), lambda m: 1)
    mesh.cells[3, 0] = 10_000
    with pytest.raises(CellIndexError, match="cell 3 refers to node 10000"):
        mesh.structure(("anything",), lambda m: 1)


def test_an_unchanged_mesh_keeps_its_memo():
    mesh, built = Mesh(POS, WEIGHT), []
    for _ in range(3):
        mesh.structure(("count",), lambda m: built.append(1) or len(built))
    assert built == [1]


# --- period= -------------------------------------------------------------------------------------
@pytest.mark.parametrize("period", [np.float32(1.0), np.float64(1.0), torch.tensor(1.0), 1, np.int64(1),
                                    [1.0, np.float32(1.0)], torch.tensor([1.0, 1.0]), np.array(1.0)])
def test_period_takes_any_real_number_type(period):
    model = _model("mesh_fno", period=period)
    assert model.period == (1.0, 1.0)
    x = POS[:, :1] * 0.9
    assert torch.isfinite(model(x, Mesh(POS * 0.9, WEIGHT))).all()


@pytest.mark.parametrize("period, match", [
    (True, "period must be a real number, got bool True"),
    (np.bool_(True), "period must be a real number, got bool"),
    (float("nan"), "period must be a finite number, got nan"),
    (float("inf"), "period must be a finite number, got inf"),
    (0.0, "period must be > 0, got 0.0"),
    (-1.0, "period must be > 0, got -1.0"),
    (1e-300, "period=1e-300 is too small"),
    ("1", "period must be a real number, got str"),
    ([1.0, 2.0, 3.0], "one positive number or 2 of them"),
    (1 + 1j, "period must be a real number, got complex"),
])
def test_period_refuses_what_is_not_a_period(period, match):
    with pytest.raises(ConfigError, match=match):
        _model("mesh_fno", period=period)


def test_a_period_shorter_than_the_nodes_extent_is_refused():
    model = _model("mesh_fno", period=0.5)
    with pytest.raises(ConfigError, match="period=0.5 along axis 0 is shorter than the nodes' extent 1 there"):
        model(POS[:, :1].clone(), Mesh(POS, WEIGHT))


# --- a budget run resumed with another budget ----------------------------------------------------
def test_a_run_resumed_with_another_time_budget_says_so(tmp_path):
    from geoattn.mesh import MeshData
    from geoattn.train import NormalizedOperator, Trainer

    torch.manual_seed(0)
    pos, weight = POS.float(), WEIGHT.float()
    samples = [MeshData(x=torch.rand(N, 1), y=torch.rand(N, 1), pos=pos, weight=weight) for _ in range(4)]

    def fit(seconds, resume):
        torch.manual_seed(0)
        op = NormalizedOperator(build_model("tno", in_channels=1, out_channels=1, width=8, depth=1))
        return Trainer(op, tmp_path, epochs=1, batch_size=2, progress=False, seconds=seconds).fit(samples, resume=resume)

    fit(1000.0, False)
    with pytest.warns(UserWarning, match="with seconds=5, but it was trained with a time budget of 1000 s.*resume "
                                         "with seconds=1000"):
        fit(5.0, True)


# --- a cell laid over others, sharing no facet with them -----------------------------------------
def test_a_cell_lying_over_others_without_a_shared_facet_is_refused():
    """The big triangle's corners are nodes of the mesh, its edges no cell's: the facet check
    sees nothing, the weights would sum to 1.5 for area 1."""
    from geoattn.errors import OverlappingCellsError
    from geoattn.mesh import validate_mesh

    pos, cells = POS.numpy(), CELLS.numpy()
    validate_mesh(pos, cells, "triangle")
    n = 17
    big = np.array([[0, n * (n - 1), n * n - 1]])  # half the square, over 128 small cells
    with pytest.raises(OverlappingCellsError, match="overlap without sharing a facet"):
        validate_mesh(pos, np.concatenate([cells, big]), "triangle")


# --- float32 casts of graded meshes --------------------------------------------------------------
def test_a_graded_mesh_float32_resolves_is_read_and_one_it_merges_is_refused():
    """Nodes 3.5e-7 apart at coordinate 1: float32 moves them by at most 6e-8 (17 % of their
    spacing), so they stay distinct and in order: accepted. Nodes 5e-8 apart there would merge."""
    from geoattn.errors import CoordinateRangeError
    from geoattn.mesh.io import cast_positions

    def graded(gap):
        x = np.unique(np.concatenate([np.linspace(0, 0.999, 50), 1 - np.arange(20)[::-1] * gap]))
        return np.stack([x, np.zeros_like(x)], 1)

    pos = cast_positions(graded(3.5e-7), torch.float32)
    assert (pos[1:, 0] > pos[:-1, 0]).all()  # distinct and in order
    with pytest.raises(CoordinateRangeError, match="merges them.*too fine for torch.float32 wherever it lies: "
                                                   "read it in float64"):
        cast_positions(graded(5e-8), torch.float32)


def test_x_on_another_device_and_numpy_options_in_checkpoints(tmp_path):
    """``x`` on another device than its mesh is one line naming both; a NumPy scalar option is
    recorded as a Python number, so the checkpoint loads with ``weights_only``."""
    import numpy as np

    from geoattn.errors import DeviceError
    from geoattn.models import build_model
    from geoattn.mesh import Mesh
    from geoattn.train import NormalizedOperator, load_operator, save_checkpoint
    from geoattn.train.checkpoint import operator_payload

    model = build_model("mesh_fno", in_channels=1, out_channels=1, width=8, depth=1, modes=2,
                        period=np.float32(1.0))
    assert type(model.hparams["period"]) is float
    save_checkpoint(tmp_path / "m.pt", {**operator_payload(NormalizedOperator(model)), "trainer": {}})
    assert load_operator(tmp_path / "m.pt").model.hparams["period"] == 1.0
    mesh = Mesh(torch.rand(5, 2) * 0.9, torch.full((5,), 0.2))
    with pytest.raises(DeviceError, match="x is on meta but the mesh on cpu"):
        model(torch.zeros(5, 1, device="meta"), mesh)


def test_a_dense_attention_that_cannot_fit_is_refused_before_it_is_built(monkeypatch):
    """The score matrix [B, H, N, N] of a TNO's attention is measured against the device's
    memory before it is built: too large is one line naming the size and the ways out."""
    from geoattn.errors import TooLargeError
    from geoattn.mesh import Mesh
    from geoattn.models import build_model
    from geoattn.nn import functional

    model = build_model("tno", in_channels=1, out_channels=1, width=8, depth=1, num_heads=2)
    mesh = Mesh(torch.rand(600, 2), torch.full((600,), 1 / 600))
    x = torch.rand(600, 1)
    model(x, mesh)  # fits the machine
    monkeypatch.setattr(functional, "memory_of", lambda device: 2**20)  # a device of 1 MiB
    with pytest.raises(TooLargeError, match=r"dense attention over 600 nodes .* needs 2\.7 MiB .* than the 1\.0 MiB .*galerkin"):
        model(x, mesh)
