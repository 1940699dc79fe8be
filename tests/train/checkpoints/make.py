"""Write the checkpoints of ``tests/train/test_old_checkpoints.py``: one small model of each kind,
saved by the geoattn that runs this script (a release before the samples named their mesh), with
its predictions on ``meshes/square_irregular.vtu``.

    git worktree add /tmp/old <revision>
    PYTHONPATH=/tmp/old python tests/train/checkpoints/make.py tests/train/checkpoints
"""

import sys
from pathlib import Path

import meshio
import torch

import geoattn
from geoattn.mesh import Mesh, from_meshio
from geoattn.models import build_model
from geoattn.train import NormalizedOperator, save_checkpoint
from geoattn.train.checkpoint import operator_payload

MODELS = {
    "tno": {}, "galerkin": {}, "slice": {}, "mesh_fno": {"modes": 4}, "gno": {},
    "multigrid": {"grid": 8, "levels": 2}, "vit": {"num_patches": 4, "modes": 2}, "fano": {"num_patches": 4, "modes": 2},
}


def main(out: Path) -> None:
    root = Path(__file__).resolve().parents[3]
    data = from_meshio(meshio.read(root / "meshes" / "square_irregular.vtu"), dtype=torch.float64)
    mesh = Mesh(data.pos, data.weight, data.cells)
    x = torch.sin(3 * data.pos[:, :1]) + data.pos[:, 1:]
    outputs = {}
    for name, kw in MODELS.items():
        torch.manual_seed(0)
        model = build_model(name, in_channels=1, out_channels=1, dim=2, width=8, depth=1, **kw).double()
        op = NormalizedOperator(model)
        op.model.fit_mesh(mesh)
        op.x_normalizer.fit([(x, data.weight)])
        op.y_normalizer.fit([(2 * x + 1, data.weight)])
        op.eval()
        with torch.no_grad():
            outputs[name] = op(x, mesh)
        save_checkpoint(out / f"{name}.pt", {**operator_payload(op), "trainer": {}})
    torch.save({"x": x, "outputs": outputs, "geoattn": geoattn.__version__}, out / "outputs.pt")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
