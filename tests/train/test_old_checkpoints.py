"""Checkpoints written before samples named their mesh (geoattn as of commit 2e3fc7a, by
``tests/train/checkpoints/make.py``) still load and predict what they predicted then."""

from pathlib import Path

import meshio
import pytest
import torch

from geoattn.mesh import Mesh, from_meshio
from geoattn.train import load_operator

HERE = Path(__file__).parent / "checkpoints"
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def stored():
    return torch.load(HERE / "outputs.pt", weights_only=True)


@pytest.mark.parametrize("name", ["tno", "galerkin", "slice", "mesh_fno", "gno", "multigrid", "vit", "fano"])
def test_a_checkpoint_of_the_former_release_predicts_as_it_did(stored, name):
    data = from_meshio(meshio.read(ROOT / "meshes" / "square_irregular.vtu"), dtype=torch.float64)
    op = load_operator(HERE / f"{name}.pt").double().eval()  # saved in float64
    with torch.no_grad():
        out = op(stored["x"], Mesh(data.pos, data.weight, data.cells))
    # the same float64 operations, at most reordered: agreement to ~1e3 roundings of the values
    torch.testing.assert_close(out, stored["outputs"][name], rtol=1e-12, atol=1e-12)
