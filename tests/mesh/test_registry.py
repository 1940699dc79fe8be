"""Meshes given to an operator beforehand and recognised by their nodes."""

from types import SimpleNamespace

import pytest
import torch

from geoattn.errors import MeshMismatchError
from geoattn.mesh import MeshRegistered, families, from_meshio, mesh_key, register_meshes
from geoattn.models import MeshFNO
from geoattn.train import Ensemble, NormalizedOperator


class Recorder(torch.nn.Module, MeshRegistered):
    def __init__(self):
        super().__init__()
        self.seen = []

    def register_mesh(self, key, mesh):
        self.seen.append(key)


def test_a_mesh_file_and_its_samples_share_a_key_and_register_once():
    mesh = families.unit_square(4, "irregular")
    sample32, sample64 = from_meshio(mesh), from_meshio(mesh, dtype=torch.float64)
    assert mesh_key(sample32.pos) == mesh_key(sample64.pos) == mesh_key(torch.as_tensor(mesh.points[:, :2]))
    rec = Recorder()
    rec.register([mesh, sample32, sample64, sample32])
    assert len(rec.seen) == 1
    assert rec.registered_key(sample64.pos) == rec.seen[0]


def test_lookup_tolerates_rounding_but_not_another_mesh():
    sample = from_meshio(families.unit_square(4, "irregular"), dtype=torch.float64)
    rec = Recorder()
    rec.register([sample])
    assert rec.registered_key(sample.pos * (1 + 1e-12)) == rec.seen[0]  # the last bits differ
    with pytest.raises(MeshMismatchError, match="4 nodes|25 nodes"):
        rec.registered_key(sample.pos + 1e-3)  # a different mesh of as many nodes
    with pytest.raises(MeshMismatchError):
        rec.registered_key(sample.pos[:-1])
    with pytest.raises(TypeError, match="meshio meshes or samples"):
        rec.register([sample.pos])


def test_register_meshes_reaches_every_registered_module_inside_wrappers():
    sample = from_meshio(families.unit_square(3, "irregular"))
    members = [MeshFNO(1, 1, modes=1, quadrature="p1") for _ in range(2)]
    op = Ensemble([NormalizedOperator(m) for m in members])
    register_meshes(op, [sample])
    assert all(len(m._cells) == 1 for m in members)
    register_meshes(torch.nn.Linear(2, 2), [SimpleNamespace()])  # nothing to register: nothing read
