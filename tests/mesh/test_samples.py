"""Samples that name their mesh: as_samples, MeshSamples, MeshStore, and the datasets' meshes
kept from one call to the next."""

import copy

import pytest
import torch

from geoattn.data import darcy_samples, refined_samples
from geoattn.mesh import Mesh, MeshData, MeshSamples, MeshStore, as_samples, families, from_meshio
from geoattn.models import NeuralOperator
from geoattn.operators.refined import training_size
from geoattn.train import Trainer, evaluate_errors
from geoattn.operators import NormalizedOperator


def _sample(base: MeshData, value: float) -> MeshData:
    d = copy.copy(base)
    d.x = torch.full((base.num_nodes, 1), value, dtype=torch.float64)
    d.y = d.x + base.pos[:, :1]
    return d


@pytest.fixture(scope="module")
def bases():
    return [from_meshio(families.unit_square(n, "irregular", seed=n), dtype=torch.float64) for n in (3, 4)]


def test_as_samples_shares_a_mesh_by_tensors_or_equal_values_only(bases):
    a, b = bases
    twin = a.clone()  # equal values, other tensors
    moved = a.clone()
    moved.pos = moved.pos + 1e-9  # other nodes: another mesh
    samples = as_samples([_sample(a, 1), _sample(b, 2), _sample(a, 3), _sample(twin, 4), _sample(moved, 5)])
    assert isinstance(samples, MeshSamples) and len(samples.meshes) == 3
    assert [d.mesh_id for d in samples] == [0, 1, 0, 0, 2]
    assert samples.meshes[0].pos is a.pos and samples.meshes[2].pos is moved.pos
    assert as_samples(samples) is samples  # a dataset that names its meshes is kept as it is
    # the inputs are not changed: the samples are shallow copies carrying mesh_id
    assert not hasattr(a, "mesh_id") or a.mesh_id is None


def test_slices_and_sums_keep_the_meshes(bases):
    samples = as_samples([_sample(bases[i % 2], i) for i in range(6)])
    head = samples[:3]
    assert isinstance(head, MeshSamples) and head.meshes is samples.meshes
    picked = samples[[5, 0]]
    assert [float(d.x[0]) for d in picked] == [5.0, 0.0] and picked.meshes is samples.meshes
    other = as_samples([_sample(bases[1], 9)])
    joined = head + other
    assert len(joined) == 4 and len(joined.meshes) == 3
    assert joined.meshes[joined[3].mesh_id] is other.meshes[0]  # renumbered, the same Mesh object
    with pytest.raises(ValueError, match="names mesh 7"):
        MeshSamples([MeshData(x=torch.zeros(3, 1), mesh_id=7)], samples.meshes)


def test_mesh_store_bounds_the_structure_it_keeps(bases, caplog):
    loads = []

    def load(k):
        loads.append(k)
        return Mesh.from_sample(bases[k % 2])

    def build(store, k):  # a batch of mesh k, and 800 bytes of structure built on it
        store.batch([k]).structure(("structure",), lambda m: torch.zeros(100, dtype=torch.float64))

    store = MeshStore(3, load=load, keep=2, max_bytes=None)
    for k in range(3):
        build(store, k)
    store.trim()
    assert loads == [0, 1, 2]  # each mesh made once
    assert [("structure",) in store[k].memo for k in (1, 2, 0)] == [True, True, False]
    assert loads == [0, 1, 2]  # the evicted mesh's nodes are kept: not read again
    # by bytes: two meshes' structure fits in 2000 bytes, three do not; the bound is logged once
    store = MeshStore(3, load=load, max_bytes=2000)
    with caplog.at_level("WARNING", logger="geoattn.mesh.samples"):
        for k in (0, 1, 2, 0, 1):
            build(store, k)
        store.trim()
    assert store.structure_bytes <= 2000
    assert sum("exceeds max_bytes=2000" in r.message for r in caplog.records) == 1
    assert [("structure",) in store[k].memo for k in (0, 1, 2)] == [True, True, False]
    with pytest.raises(IndexError, match="holds 3 meshes"):
        store[3]
    with pytest.raises(ValueError, match="keep"):
        MeshStore([], keep=0)


def test_batches_are_made_of_the_members_on_the_device(bases):
    store = MeshStore([Mesh.from_sample(b) for b in bases])
    batch = store.batch([1, 0, 1])
    assert batch.num_graphs == 3 and batch.graphs()[0] is store[1] and batch.graphs()[2] is store[1]
    assert torch.equal(batch.weight, torch.cat([bases[1].weight, bases[0].weight, bases[1].weight]))
    moved = store.batch([0, 1], device="cpu")
    assert moved.graphs()[0] is store[0]  # on its own device: no copy


class _Counting(NeuralOperator):
    """A pointwise model that builds (and counts) one structure per mesh, in the mesh's memo."""

    builds = 0

    def __init__(self, in_channels: int = 1, out_channels: int = 1, dim: int = 2):
        super().__init__()
        self.in_channels, self.out_channels, self.dim = in_channels, out_channels, dim
        self.scale = torch.nn.Parameter(torch.ones((), dtype=torch.float64))

    def forward(self, x, mesh):
        def build(m):
            _Counting.builds += 1
            return m.pos[:, :1].clone()

        feature = mesh.structure(("counting",), build, join=lambda batch, parts: torch.cat(parts))
        return self.scale * x + feature


def test_a_second_fit_and_an_evaluation_reuse_each_meshs_structure(bases):
    """One mesh per sample: the structure of each is built in the first epoch of the first fit
    only; a second fit, an evaluation and the trainer's validation reuse it."""
    samples = as_samples([_sample(bases[i % 2], 0.1 * (i + 1)) for i in range(4)])
    _Counting.builds = 0
    op = NormalizedOperator(_Counting())
    Trainer(op, epochs=2, batch_size=3, progress=False).fit(samples, val=samples[:2])
    assert _Counting.builds == 2  # one per mesh
    Trainer(op, epochs=1, batch_size=2, progress=False).fit(samples[1:])
    evaluate_errors(op, samples)
    assert _Counting.builds == 2


def test_datasets_name_their_meshes(bases):
    from geoattn.mesh import families as fam

    meshes = {"a": fam.unit_square(3, "irregular", seed=1), "b": fam.unit_square(4, "irregular", seed=2)}
    sets = darcy_samples(meshes, 3, seed=0, dtype=torch.float64)
    for name, samples in sets.items():
        assert isinstance(samples, MeshSamples) and len(samples.meshes) == 1
        assert all(d.mesh_id == 0 for d in samples)
        assert samples.meshes[0].num_nodes == len(meshes[name].points)
    fine = refined_samples(sets["a"])
    assert len(fine.meshes) == 1 and fine.meshes[0].num_nodes > sets["a"].meshes[0].num_nodes
    source = sets["a"].meshes[0]
    assert fine.meshes[0] is source.refined(training_size(source) / 2)[0]  # kept in the source's memo


def test_a_dataset_file_keeps_its_mesh_across_subsets(tmp_path):
    from geoattn.cli.main import main
    from geoattn.data import DarcyDataset

    path = tmp_path / "d.h5"
    assert main(["generate", "--mesh", "train=meshes/square_irregular.vtu", "--n", "3", "--out", str(path),
                 "--no-progress"]) == 0
    ds = DarcyDataset(path)
    head = ds[:2]
    assert head.meshes is ds.meshes and list(head.mesh_ids) == [0, 0] and head[1].mesh_id == 0
    assert as_samples(head) is head
    assert as_samples(torch.utils.data.Subset(ds, [2, 0])).meshes is ds.meshes


def test_moved_nodes_with_stale_weights_are_named(bases, caplog):
    """A transform that scales ``pos`` (PyG's ``NormalizeScale``) leaves the weights of the old
    size: the boundary says so, naming the sample and the fix; unmoved samples pass quietly."""
    from torch_geometric.transforms import NormalizeScale

    moved = NormalizeScale()(_sample(bases[0], 1.0).clone())
    with caplog.at_level("WARNING", logger="geoattn.mesh.samples"):
        as_samples([_sample(bases[1], 1.0)], name="training")
        assert not caplog.records
        as_samples([_sample(bases[1], 1.0), moved], name="training")
    assert len(caplog.records) == 1 and "training sample 1" in caplog.text and "quadrature_weights" in caplog.text
