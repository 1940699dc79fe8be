import importlib.util
import pathlib

import meshio
import numpy as np
import torch

from geoattn.mesh import from_meshio

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _load(name):
    spec = importlib.util.spec_from_file_location(name, ROOT / "examples" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_train_cross_mesh_example_keeps_error_across_meshes():
    report = _load("train_cross_mesh").main(train=16, test=2, epochs=3, width=16, depth=1)
    assert report.mean("TNO", "train") < 0.6
    assert all(report.ratio("TNO", m) < 1.5 for m in report.nodes)


def test_predict_meshio_example_prediction_matches_direct_call(tmp_path):
    module = _load("predict_meshio")
    torch.manual_seed(0)
    operator = module.tiny_operator(epochs=1)
    module.tiny_operator = lambda: operator
    result = module.main(output=str(tmp_path / "p.vtu"))
    pred = result.point_data["prediction"]
    assert pred.shape == (len(result.points), 1) and np.isfinite(pred).all()
    d = from_meshio(meshio.read(tmp_path / "p.vtu"), x="a", y="prediction")
    with torch.no_grad():
        assert torch.allclose(operator(d.x, d.pos, d.weight), d.y, rtol=1e-5, atol=1e-6)
