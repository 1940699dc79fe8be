"""Dataset files: round trip with the in-memory generator, lazy PyG loading, XDMF companion,
clear errors on damaged or foreign files, resume of an interrupted generation."""

import xml.etree.ElementTree as ET

import h5py
import numpy as np
import pytest
import torch
from torch_geometric.loader import DataLoader

from geoattn.data import darcy, generate as gen
from geoattn.data.darcy import darcy_samples
from geoattn.data.dataset import DarcyDataset, crc32, mesh_hash
from geoattn.data.recipe import Recipe, load_recipe
from geoattn.errors import DatasetFileError
from geoattn.mesh import families, integrate

MESHES = {"coarse": {"family": "unit_square", "n": 8, "kind": "irregular", "seed": 2},
          "fine": {"family": "unit_square", "n": 8, "kind": "irregular", "seed": 2, "refine": 1}}


def recipe(n=5, **kw):
    return Recipe(meshes=MESHES, n=n, seed=3, family="lognormal", grf={"preset": "cao", "modes": 12}, **kw)


@pytest.fixture
def made(tmp_path):
    r = recipe()
    return gen.generate_darcy(tmp_path / "d.h5", r, progress=False), r


def test_file_matches_in_memory_samples(made):
    path, r = made
    mem = darcy_samples(r.load_meshes(), n=r.n, seed=r.seed, family=r.family, field=r.field(),
                        dtype=torch.float64)
    for name in MESHES:
        ds = DarcyDataset(path, mesh=name, dtype=torch.float64)
        assert len(ds) == r.n
        for i in range(r.n):
            got, want = ds[i], mem[name][i]
            for key in ("pos", "weight", "x", "y", "cells"):
                torch.testing.assert_close(got[key], want[key], rtol=0, atol=0)
            assert got.cell_type == "triangle"
        assert np.isclose(float(ds[0].weight.sum()), 1.0)


def test_pyg_loader_batches_lazily(made):
    path, _ = made
    ds = DarcyDataset(path, mesh="fine")
    batch = next(iter(DataLoader(ds, batch_size=3)))
    assert batch.num_graphs == 3 and batch.x.shape == (3 * ds[0].num_nodes, 1)
    # a weighted mean per graph: the quadrature, never a plain mean
    means = integrate(batch.y[:, 0], batch.weight, batch.batch, 3)
    for g in range(3):
        assert torch.isclose(means[g], (ds[g].weight * ds[g].y[:, 0]).sum())
    with pytest.raises(ValueError, match="choose one with mesh"):
        DarcyDataset(path)
    with pytest.raises(ValueError, match="no mesh 'other'"):
        DarcyDataset(path, mesh="other")


def test_stored_recipe_and_metadata(made):
    path, r = made
    ds = DarcyDataset(path, mesh="coarse")
    assert Recipe.from_json(ds.recipe) == r
    assert ds.attrs["format"] == "geoattn-dataset" and "geoattn_version" in ds.attrs
    with h5py.File(path) as fh:
        for name in MESHES:
            g = fh[f"meshes/{name}"]
            assert g.attrs["mesh_hash"] == mesh_hash(g["points"][:], g["cells"][:])
            # allocated at creation: writing a sample changes no file metadata
            assert g["x"].chunks is None and g["x"].id.get_storage_size() == g["x"].nbytes


def test_xdmf_companion_references_resolve(made):
    path, r = made
    xdmf = path.with_name("d.fine.xdmf")
    root = ET.parse(xdmf).getroot()
    steps = root.findall("./Domain/Grid/Grid")
    assert len(steps) == r.n
    with h5py.File(path) as fh:
        for item in root.iter("DataItem"):
            if item.get("Format") != "HDF":
                continue
            fname, ds_path = item.text.split(":")
            assert fname == path.name
            dims = tuple(int(d) for d in item.get("Dimensions").split())
            assert fh[ds_path].shape == dims
        # hyperslab of step 3 selects row 3 of x
        slab = steps[3].find("./Attribute[@Name='a']/DataItem/DataItem").text.split()
        assert slab[:2] == ["3", "0"]


def test_xdmf_companion_mesh_reads_in_meshio(made):
    """A second XDMF reader agrees on the companion's mesh: meshio's TimeSeriesReader gives the
    dataset's points and cells (its fields are hyperslabs, which meshio does not read; see the
    data page)."""
    import meshio

    path, r = made
    with meshio.xdmf.TimeSeriesReader(path.with_name("d.fine.xdmf")) as reader:
        points, cells = reader.read_points_cells()
        assert reader.num_steps == r.n
    with h5py.File(path) as fh:
        assert np.array_equal(points, fh["meshes/fine/points"][:])
        assert len(cells) == 1 and cells[0].type == fh["meshes/fine"].attrs["cell_type"]
        assert np.array_equal(cells[0].data, fh["meshes/fine/cells"][:])


def test_truncated_file(made, tmp_path):
    path, _ = made
    data = path.read_bytes()
    bad = tmp_path / "trunc.h5"
    bad.write_bytes(data[: len(data) // 2])
    with pytest.raises(DatasetFileError, match="truncated"):
        DarcyDataset(bad, mesh="fine")


def test_foreign_files(tmp_path, meshes_dir):
    with pytest.raises(DatasetFileError, match="cannot open .* as HDF5"):
        DarcyDataset(meshes_dir / "square_irregular.vtu")
    other = tmp_path / "other.h5"
    with h5py.File(other, "w") as fh:
        fh["a"] = np.zeros(3)
    with pytest.raises(DatasetFileError, match="not a geoattn dataset"):
        DarcyDataset(other)
    with pytest.raises(FileNotFoundError):
        DarcyDataset(tmp_path / "missing.h5")


def test_corrupted_values_fail_checksum(made):
    path, _ = made
    with h5py.File(path, "r+") as fh:
        fh["meshes/fine/y"][2, 5] += 1e-9  # a silent change in one value
    ds = DarcyDataset(path, mesh="fine")
    ds[1]
    with pytest.raises(DatasetFileError, match="sample 2 of mesh 'fine' fails its checksum"):
        ds[2]
    ds.close()
    with h5py.File(path, "r+") as fh:
        fh["meshes/coarse/points"][0, 0] = 0.5
    with pytest.raises(DatasetFileError, match="mesh 'coarse' fails its checksum"):
        DarcyDataset(path, mesh="coarse")


def test_corrupted_bytes_raise_dataset_error(made):
    path, _ = made
    raw = bytearray(path.read_bytes())
    rng = np.random.default_rng(0)
    for i in rng.integers(len(raw) // 4, len(raw), 200):
        raw[i] ^= 0xFF
    path.write_bytes(bytes(raw))
    with pytest.raises(DatasetFileError):
        ds = DarcyDataset(path, mesh="fine")
        for i in range(len(ds)):
            ds[i]


def test_resume_after_interruption(tmp_path, monkeypatch):
    r = recipe(n=6)
    full = gen.generate_darcy(tmp_path / "full.h5", r, progress=False)
    calls = []
    real = gen.solve_sample

    def interrupted(problems, field, seed, index, *args):
        if len(calls) == 4:
            raise KeyboardInterrupt
        calls.append(index)
        return real(problems, field, seed, index, *args)

    monkeypatch.setattr(gen, "solve_sample", interrupted)
    path = tmp_path / "part.h5"
    with pytest.raises(KeyboardInterrupt):
        gen.generate_darcy(path, r, progress=False)
    with pytest.raises(DatasetFileError, match="incomplete: 4 of 6"):
        DarcyDataset(path, mesh="fine")
    calls.clear()
    monkeypatch.setattr(gen, "solve_sample", lambda *a: (calls.append(a[3]), real(*a))[1])
    gen.generate_darcy(path, r, progress=False)
    assert calls == [4, 5]  # only the missing samples are solved
    with h5py.File(path) as a, h5py.File(full) as b:
        for name in MESHES:
            np.testing.assert_array_equal(a[f"meshes/{name}/y"][:], b[f"meshes/{name}/y"][:])
    with pytest.raises(DatasetFileError, match="different recipe"):
        gen.generate_darcy(path, recipe(n=7), progress=False)


def test_parallel_equals_serial(tmp_path):
    r = recipe(n=4)
    a = gen.generate_darcy(tmp_path / "a.h5", r, progress=False)
    b = gen.generate_darcy(tmp_path / "b.h5", r, workers=2, progress=False)
    with h5py.File(a) as fa, h5py.File(b) as fb:
        np.testing.assert_array_equal(fa["meshes/fine/y"][:], fb["meshes/fine/y"][:])
        assert fb["done"][:].all()


def test_recipe_toml(tmp_path):
    text = """
name = "t"
family = "piecewise"
n = 2
seed = 1
grf = { preset = "calvello", modes = 8 }
[meshes.train]
path = "square_irregular.vtu"
[meshes.other]
family = "unit_square"
n = 6
kind = "graded"
"""
    p = tmp_path / "r.toml"
    p.write_text(text)
    r = load_recipe(p)
    assert r.field().tau == 12.0 and r.field().modes == (8, 8)
    with pytest.raises(FileNotFoundError, match="square_irregular.vtu"):
        r.load_meshes(tmp_path)
    with pytest.raises(ValueError, match="exactly one of"):
        Recipe(meshes={"m": {"path": "a", "family": "unit_square"}}, n=1)


def test_checksum_is_order_sensitive():
    a, b = np.arange(4.0), np.arange(4.0)[::-1]
    assert crc32(a) != crc32(b) and crc32(a, b) != crc32(b, a)


_ = darcy  # the module the generator delegates to
