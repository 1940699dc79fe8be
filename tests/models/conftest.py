import pytest
import torch

from geoattn.mesh import families, from_meshio

from smooth_inputs import smooth_input


@pytest.fixture(scope="session")
def two_meshes():
    """An irregular mesh and its refinement, with ``x = smooth_input(pos)`` (float64)."""
    mesh = families.unit_square(4, "irregular", seed=1)
    data = [from_meshio(m, dtype=torch.float64) for m in (mesh, families.refine(mesh, 1))]
    for d in data:
        d.x = smooth_input(d.pos)
    return data


@pytest.fixture(scope="session")
def darcy_transfer():
    """``train(model, inner=None) -> CrossMeshReport``: the model, trained for 12 epochs on 48
    lognormal Darcy samples of an irregular 169-node mesh, scored on 6 other samples on that mesh
    (``train``), its refinement (``refined``) and a graded 625-node mesh (``graded``)."""
    from geoattn.data import darcy_samples
    from geoattn.eval import cross_mesh_report
    from geoattn.train import NormalizedOperator, Trainer

    meshes = {"train": families.unit_square(12, "irregular", seed=1)}
    meshes["refined"] = families.refine(meshes["train"], 1)
    meshes["graded"] = families.unit_square(24, "graded")
    train = darcy_samples({"train": meshes["train"]}, 48, seed=0, family="lognormal")["train"]
    test = darcy_samples(meshes, 6, seed=0, family="lognormal", start=48)

    def run(model, inner: torch.nn.Module | None = None):
        """Train ``model``; with ``inner`` (a module inside ``model``, e.g. the model a wrapper
        stands in for), score it too, as ``inner``, with the same normalisers."""
        op = NormalizedOperator(model)
        Trainer(op, epochs=12, batch_size=4, lr=3e-3, progress=False).fit(train)
        operators = {"model": op}
        if inner is not None:
            operators["inner"] = NormalizedOperator(inner)
            for name in ("x_normalizer", "y_normalizer"):
                getattr(operators["inner"], name).load_state_dict(getattr(op, name).state_dict())
        return cross_mesh_report(operators, test)

    return run
