"""The former call ``model(x, pos, weight, batch)`` and moved names: they still work, warn with a
DeprecationWarning at the caller's line, and give what the Mesh call gives; a foreign module
written for the former call is wrapped explicitly with MeshCall."""

import importlib
import warnings

import pytest
import torch

from geoattn.compat import MeshCall
from geoattn.errors import BatchOrderError, WeightError
from geoattn.mesh import Mesh, families, from_meshio
from geoattn.models import build_model
from geoattn.operators import RefinedOperator


def _sample(n, seed=0):
    d = from_meshio(families.unit_square(n, "irregular", seed=seed), dtype=torch.float64)
    d.x = torch.sin(3 * d.pos[:, :1])
    return d


def _model(**kw):
    torch.manual_seed(0)
    return build_model("tno", in_channels=1, out_channels=1, width=8, depth=1, num_heads=2, **kw).double().eval()


@torch.no_grad()
def test_the_former_call_warns_at_the_call_site_and_equals_the_mesh_call():
    model, a, b = _model(decoder="cross"), _sample(4), _sample(5, seed=1)
    mesh = Mesh.batch([Mesh(a.pos, a.weight), Mesh(b.pos, b.weight)])
    x = torch.cat([a.x, b.x])
    with pytest.warns(DeprecationWarning, match=r"TNO\(x, pos, weight, batch\) is deprecated") as record:
        old = model(x, mesh.pos, mesh.weight, mesh.batch_vector)
    assert record[0].filename == __file__
    assert torch.equal(old, model(x, mesh))
    query = Mesh(a.pos[::2], a.weight[::2])
    with pytest.warns(DeprecationWarning):
        old = model(a.x, a.pos, a.weight, pos_query=query.pos, weight_query=query.weight)
    assert torch.equal(old, model(a.x, Mesh(a.pos, a.weight), query=query))


def test_the_former_call_keeps_its_typed_errors():
    model, d = _model(), _sample(4)
    with pytest.warns(DeprecationWarning), pytest.raises(WeightError):
        model(d.x, d.pos, d.weight[:-1])
    batch = torch.zeros(d.num_nodes, dtype=torch.long)
    batch[0] = 1
    with pytest.warns(DeprecationWarning), pytest.raises(BatchOrderError):
        model(d.x, d.pos, d.weight, batch)


def test_a_mesh_with_further_arguments_is_refused():
    model, d = _model(), _sample(4)
    mesh = Mesh(d.pos, d.weight)
    with pytest.raises(TypeError, match="the Mesh carries"):
        model(d.x, mesh, d.weight)
    with pytest.raises(TypeError, match="unexpected keyword"):
        model(d.x, d.pos, d.weight, scale=2.0)


def test_the_former_query_without_weights_is_refused_by_the_patched_decoders():
    torch.manual_seed(0)
    model = build_model("vit", in_channels=1, out_channels=1, width=8, depth=1, num_heads=2, num_patches=4,
                        modes=1, decoder="cross").double()
    d = _sample(6)
    with pytest.warns(DeprecationWarning), pytest.raises(ValueError, match="quadrature weights"):
        model(d.x, d.pos, d.weight, pos_query=d.pos)


def test_the_former_fit_mesh_warns_and_fits_the_same_partition():
    d = _sample(6)
    kw = dict(in_channels=1, out_channels=1, width=8, depth=1, num_heads=2, num_patches=4, modes=1,
              partition_method="metis")
    new, old = build_model("fano", **kw), build_model("fano", **kw)
    new.fit_mesh(Mesh(d.pos, d.weight, d.cells))
    with pytest.warns(DeprecationWarning, match="fit_mesh"):
        old.fit_mesh(d.pos, d.weight, d.cells)
    for key, value in new.state_dict().items():
        if key.startswith("partition_"):
            assert torch.equal(value, old.state_dict()[key])


class _Foreign(torch.nn.Module):
    """A module of another library, written for the former call."""

    in_channels, out_channels, dim = 1, 1, 2

    def forward(self, x, pos, weight, batch=None, pos_query=None, weight_query=None, batch_query=None):
        return 3 * x + pos[:, :1]


@torch.no_grad()
def test_a_foreign_module_is_wrapped_explicitly_and_composes_with_the_operators():
    d = _sample(4)
    mesh = Mesh.from_sample(d)
    op = MeshCall(_Foreign())
    assert op.in_channels == 1 and op.dim == 2
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        torch.testing.assert_close(op(d.x, mesh), 3 * d.x + d.pos[:, :1])
        refined = RefinedOperator(op, 0.05)
        torch.testing.assert_close(refined(d.x, mesh), op(d.x, mesh))  # pointwise: linear in x and pos


@pytest.mark.parametrize("module, name, new", [
    ("geoattn.train.normalizer", "GaussianNormalizer", "geoattn.operators.normalizer.GaussianNormalizer"),
    ("geoattn.train.operator", "NormalizedOperator", "geoattn.operators.normalized.NormalizedOperator"),
    ("geoattn.train.resolved", "RefinedOperator", "geoattn.operators.refined.RefinedOperator"),
    ("geoattn.train.resolved", "ResolvedQuadrature", "geoattn.operators.refined.RefinedOperator"),
    ("geoattn.train.symmetrized", "symmetrize", "geoattn.operators.symmetrized.symmetrize"),
    ("geoattn.train.wrapper", "WrappedOperator", "geoattn.operators.wrapper.WrappedOperator"),
    ("geoattn.operators", "ResolvedQuadrature", "geoattn.operators.refined.RefinedOperator"),
    ("geoattn.train", "ResolvedQuadrature", "geoattn.operators.refined.RefinedOperator"),
])
def test_moved_names_warn_and_are_the_new_objects(module, name, new):
    home, _, attr = new.rpartition(".")
    with pytest.warns(DeprecationWarning, match=f"{module}.{name} is deprecated"):
        old = getattr(importlib.import_module(module), name)
    assert old is getattr(importlib.import_module(home), attr)
    with pytest.raises(AttributeError):
        getattr(importlib.import_module(module), "no_such_name")
