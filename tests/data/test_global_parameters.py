"""Global parameters reach the model: a target that depends on a per-sample scalar cannot be fitted
without it (a mathematical floor) and is fitted with it, through the dataset file."""

import meshio
import numpy as np
import torch

from geoattn.data import MeshDataset, write_mesh_dataset
from geoattn.mesh import families
from geoattn.models import build_model
from geoattn.train import NormalizedOperator, Trainer, evaluate_errors


def _files(folder, loads):
    """One file per sample on one mesh: input a(x) the same in every file, target load * a(x) (the
    load comes from a table beside the files)."""
    mesh = families.unit_square(7, "irregular")
    x, y = mesh.points[:, 0], mesh.points[:, 1]
    a = 1.0 + np.sin(np.pi * x) * np.sin(np.pi * y)
    paths = []
    for i, load in enumerate(loads):
        path = folder / f"s{i}.vtu"
        meshio.write(path, meshio.Mesh(mesh.points, mesh.cells, point_data={"a": a, "u": load * a}))
        paths.append(path)
    return paths


def _floor(loads) -> float:
    r"""The least mean relative L2 error of any prediction that does not see the load.

    The input is the same in every sample, so such a model predicts one function f for all. In the
    weighted inner product, :math:`\|f - p_i a\| \ge \|c a - p_i a\|` with :math:`c a` the
    projection of f on a, so the error of sample i is at least :math:`|c - p_i| / p_i`; its mean
    is piecewise linear in c and least at one of the :math:`p_i`."""
    p = np.asarray(loads)
    return float(min(np.mean(np.abs(c - p) / p) for c in p))


def test_a_model_fits_the_target_with_the_parameter_and_cannot_without_it(tmp_path):
    rng = np.random.default_rng(0)
    loads = rng.uniform(1.0, 3.0, 24)
    n = len(loads)
    files = _files(tmp_path, loads)
    path = write_mesh_dataset(tmp_path / "d.h5", files, x=["a"], y=["u"], params=["load"],
                              splits={"train": range(n)}, progress=False,
                              tables={f.name: {"load": float(p)} for f, p in zip(files, loads)})
    floor = _floor(loads)
    assert floor > 0.15  # the loads spread over [1, 3]
    errors = {}
    for with_params in (False, True):
        data = MeshDataset(path, "train", params_as_channels=with_params)
        samples = [data[i] for i in range(len(data))]
        torch.manual_seed(0)
        model = build_model("tno", in_channels=samples[0].x.shape[1], out_channels=1, width=16, depth=1)
        op = NormalizedOperator(model)
        Trainer(op, epochs=60, batch_size=8, lr=3e-3, progress=False).fit(samples)
        errors[with_params] = float(evaluate_errors(op, samples).mean())  # quadrature-ok: over samples
    # without the load no model can beat the floor (up to float32 rounding of the error)
    assert errors[False] >= floor * (1 - 1e-4)
    # with it the same model fits the samples far below that floor
    assert errors[True] < floor / 4
