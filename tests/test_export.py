"""Export (geoattn.export): the operator a user loads runs, exported, on a mesh of another size as
it runs eagerly; a model that cannot be exported says so in one typed line."""

from pathlib import Path

import meshio
import numpy as np
import pytest
import torch

from geoattn.export import NOT_EXPORTABLE, ExportError, SingleMesh, export_operator
from geoattn.mesh import Mesh, from_meshio
from geoattn.models import build_model
from geoattn.operators import NormalizedOperator
from geoattn.train import load_operator, operator_payload, save_checkpoint

MESHES = Path(__file__).resolve().parents[1] / "meshes"


def _mesh(name, **frame):
    data = from_meshio(meshio.read(MESHES / name), dtype=torch.float32, **frame)
    return data, Mesh(data.pos, data.weight)


def _operator(name, seed=0):
    torch.manual_seed(seed)
    op = NormalizedOperator(build_model(name, in_channels=2, out_channels=2, dim=2, width=8, depth=1))
    op.x_normalizer.mean.fill_(0.3)  # a fitted normaliser: part of what is exported
    op.y_normalizer.std.fill_(2.0)
    return op.eval()


@pytest.fixture(scope="module")
def meshes():
    return _mesh("square_irregular.vtu"), _mesh("square_graded_refined.vtu")


def _input(pos):
    return torch.stack([torch.sin(3 * pos[:, 0]), pos[:, 1] ** 2], dim=1)  # [N, 2]


@pytest.mark.parametrize("name", ["tno", "galerkin", "slice", "mesh_fno"])
def test_torch_export_runs_on_a_mesh_of_another_size_as_eager(meshes, name):
    (_, small), (big_data, big) = meshes
    op = _operator(name)
    program = export_operator(op, small)
    assert small.num_nodes != big.num_nodes
    x = _input(big.pos)
    with torch.no_grad():
        eager = op(x, big)
        exported = program.module()(x, big.pos, big.weight)
    torch.testing.assert_close(exported, eager, rtol=1e-5, atol=1e-5 * float(eager.abs().max()))


@pytest.mark.parametrize("name", ["tno", "slice"])
def test_onnx_runs_in_onnxruntime_on_a_mesh_of_another_size_as_eager(meshes, name, tmp_path):
    ort = pytest.importorskip("onnxruntime")
    pytest.importorskip("onnxscript")
    (_, small), (_, big) = meshes
    op = _operator(name)
    export_operator(op, small, tmp_path / "op.onnx")
    session = ort.InferenceSession(str(tmp_path / "op.onnx"))
    assert [i.shape[0] for i in session.get_inputs()] == ["N", "N", "N"]  # the node count is symbolic
    x = _input(big.pos)
    (out,) = session.run(None, {"x": x.numpy(), "pos": big.pos.numpy(), "weight": big.weight.numpy()})
    with torch.no_grad():
        eager = op(x, big).numpy()
    # float32 rounding of the same operations, reordered: a few ulps of the output's scale
    assert np.abs(out - eager).max() <= 1e-5 * np.abs(eager).max()


def test_the_loaded_operator_exports_with_its_frame_and_names(tmp_path):
    frame = {"origin": [0.25, -0.5], "scale": 2.0}
    data, framed = _mesh("square_irregular.vtu", **frame)
    raw, _ = _mesh("square_irregular.vtu")
    op = _operator("tno")
    op.record_frame((frame["origin"], frame["scale"]))
    op.fields = {"x": ["a", "b"], "y": ["u", "v"], "params": []}
    save_checkpoint(tmp_path / "best.pt", operator_payload(op))
    loaded = load_operator(tmp_path / "best.pt")
    assert loaded.frame == frame and loaded.y_names == ["u", "v"]
    x = _input(raw.pos)
    with torch.no_grad():
        eager = loaded(x, framed)  # the file read in the training frame, as predict reads it
        module = SingleMesh(loaded)(x, raw.pos, raw.weight)  # the file's own coordinates and weights
    torch.testing.assert_close(module, eager, rtol=1e-5, atol=1e-6)


def test_the_onnx_file_names_the_fields(tmp_path, meshes):
    onnx = pytest.importorskip("onnx")
    pytest.importorskip("onnxscript")
    (_, small), _ = meshes
    op = _operator("galerkin")
    op.fields = {"x": ["kappa"], "y": ["T", "q"], "params": ["load"]}
    export_operator(op, small, tmp_path / "op.onnx")
    meta = {p.key: p.value for p in onnx.load(str(tmp_path / "op.onnx")).metadata_props}
    assert meta["geoattn.model"] == "galerkin" and meta["geoattn.y"] == "T,q" and meta["geoattn.params"] == "load"


@pytest.mark.parametrize("name", sorted(NOT_EXPORTABLE))
def test_a_model_that_builds_host_structure_refuses_in_one_line(meshes, name):
    (_, small), _ = meshes
    torch.manual_seed(0)
    kwargs = {"num_patches": 4} if name in ("vit", "fano") else {}
    try:
        model = build_model(name, in_channels=1, out_channels=1, dim=2, width=8, depth=1, **kwargs)
    except TypeError:
        model = build_model(name, in_channels=1, out_channels=1, dim=2)
    with pytest.raises(ExportError, match=f"model '{name}' cannot be exported") as err:
        export_operator(NormalizedOperator(model), small)
    assert "\n" not in str(err.value)


def test_complex_weights_refuse_onnx_in_one_line_but_export_to_pt2(meshes, tmp_path):
    pytest.importorskip("onnxscript")
    (_, small), _ = meshes
    op = _operator("mesh_fno")
    with pytest.raises(ExportError, match="complex") as err:
        export_operator(op, small, tmp_path / "op.onnx")
    assert "\n" not in str(err.value) and not (tmp_path / "op.onnx").exists()
    export_operator(op, small, tmp_path / "op.pt2")
    program = torch.export.load(str(tmp_path / "op.pt2"))
    x = _input(small.pos)
    with torch.no_grad():
        torch.testing.assert_close(program.module()(x, small.pos, small.weight), op(x, small))
