"""Dataset files of version 2 (geoattn.data.meshdataset): shared and per-sample meshes, several
named fields, global parameters, named splits, checksums, atomic and resumable writes."""

import h5py
import meshio
import numpy as np
import pytest
import torch

from geoattn.data import DarcyDataset, MeshDataset, dataset_version, write_mesh_dataset
from geoattn.data import meshdataset
from geoattn.errors import ConfigError, DatasetFileError, FieldLengthError, InputFilesError, MeshFileError
from geoattn.eval.crossmesh import cross_mesh_report, split_report
from geoattn.mesh import from_meshio
from simulation_files import plate_with_hole, simulation


def write_files(folder, sizes, loads=None, ext=".vtu"):
    files = []
    for i, n in enumerate(sizes):
        load = 1.0 + i if loads is None else loads[i]
        path = folder / f"s{i}{ext}"
        meshio.write(path, simulation(plate_with_hole(n, seed=i), load))
        files.append(path)
    return files


@pytest.fixture
def files(tmp_path):
    return write_files(tmp_path, [6, 7, 6, 8, 7])


def _tables(files):
    return {str(f): {"load": float(i)} for i, f in enumerate(files)}


SPLITS = {"train": [0, 1, 2], "val": [3], "holes": [4]}


def test_samples_round_trip_with_fields_parameters_and_splits(files, tmp_path):
    out = write_mesh_dataset(tmp_path / "d.h5", files, x=["kappa"], y=["T", "q"], params=["load"],
                             splits=SPLITS, tables=_tables(files), progress=False)
    assert dataset_version(out) == 2 and not (tmp_path / "d.h5.partial").exists()
    everything = MeshDataset(out)
    assert len(everything) == 5 and everything.splits == {"train": 3, "val": 1, "holes": 1}
    assert everything.test_sets == ["holes"]
    assert (everything.x_names, everything.y_names, everything.param_names) == (["kappa"], ["T", "q"], ["load"])
    for i, f in enumerate(files):
        expected = from_meshio(meshio.read(f), x="kappa", y=["T", "q"])
        sample = everything[i]
        torch.testing.assert_close(sample.pos, expected.pos)
        torch.testing.assert_close(sample.weight, expected.weight)
        torch.testing.assert_close(sample.x, expected.x)
        torch.testing.assert_close(sample.y, expected.y)
        assert torch.equal(sample.cells, expected.cells) and sample.cell_type == "triangle"
        assert sample.params.tolist() == [[float(i)]]
    train = MeshDataset(out, "train", params_as_channels=True)
    assert len(train) == 3 and train.in_channels == 2 and train.out_channels == 2
    sample = train[2]  # sample 2 of the file: load 2, appended as a constant channel
    assert sample.x.shape == (sample.num_nodes, 2) and torch.all(sample.x[:, 1] == 2.0)
    assert MeshDataset(out, "holes")[0].pos.shape == everything[4].pos.shape


def test_identical_meshes_are_stored_once(tmp_path):
    mesh = plate_with_hole(6)
    files = []
    for i in range(3):
        files.append(tmp_path / f"a{i}.vtu")
        meshio.write(files[-1], simulation(mesh, float(i)))
    files += write_files(tmp_path / "own", [7, 8]) if (tmp_path / "own").mkdir() is None else []
    out = write_mesh_dataset(tmp_path / "d.h5", files, x=["kappa"], y=["T"],
                             splits={"train": [0, 1, 2, 3, 4]}, progress=False)
    with h5py.File(out) as fh:
        assert len(fh["meshes"]) == 3  # one shared by three samples, one per other sample
        assert fh["samples/mesh"][:].tolist() == [0, 0, 0, 1, 2]
    ds = MeshDataset(out)
    assert not torch.equal(ds[0].y, ds[1].y) and torch.equal(ds[0].pos, ds[1].pos)


def test_a_corrupted_sample_fails_its_checksum(files, tmp_path):
    out = write_mesh_dataset(tmp_path / "d.h5", files, x=["kappa"], y=["T"],
                             splits={"train": list(range(5))}, progress=False)
    with h5py.File(out, "r+") as fh:
        fh["meshes/000001/y"][0, 3, 0] += 1.0
    ds = MeshDataset(out)
    ds[0]
    with pytest.raises(DatasetFileError, match="sample 1 .*fails its checksum"):
        ds[1]


def test_a_bad_file_is_named_and_nothing_is_written(files, tmp_path):
    broken = simulation(plate_with_hole(6), 0.0)
    del broken.point_data["T"]
    meshio.write(files[3], broken)
    with pytest.raises(FieldLengthError, match=r"s3\.vtu.*'T'"):
        write_mesh_dataset(tmp_path / "d.h5", files, x=["kappa"], y=["T"],
                           splits={"train": list(range(5))}, progress=False)
    files[2].write_bytes(b"not a mesh")  # two bad files: both named, in one error
    with pytest.raises(InputFilesError, match=r"2 of 5 input files .*\(1\) cannot read mesh file \S*s2\.vtu.* "
                                              r"\(2\) \S*s3\.vtu: point field 'T' not found") as raised:
        write_mesh_dataset(tmp_path / "d.h5", files, x=["kappa"], y=["T"],
                           splits={"train": list(range(5))}, progress=False)
    assert [type(e) for e in raised.value.errors] == [MeshFileError, FieldLengthError]
    assert not list(tmp_path.glob("d.h5*")) and not list(tmp_path.glob(".d.h5*"))


def test_a_missing_parameter_is_named(files, tmp_path):
    tables = _tables(files)
    del tables[str(files[1])]
    with pytest.raises(FieldLengthError, match=r"s1\.vtu: no parameter 'load'"):
        write_mesh_dataset(tmp_path / "d.h5", files, x=["kappa"], y=["T"], params=["load"],
                           splits={"train": list(range(5))}, tables=tables, progress=False)
    assert not list(tmp_path.glob("d.h5*"))


def test_parameters_from_field_data(files, monkeypatch):
    real = meshdataset.read_meshio

    def with_field_data(path):
        mesh = real(path)
        mesh.field_data = {"load": np.array([7.5])}
        return mesh

    monkeypatch.setattr(meshdataset, "read_meshio", with_field_data)
    _, params = meshdataset.read_sample(files[0], ["kappa"], ["T"], ["load"], {"load": 1.0})
    assert params.tolist() == [7.5]  # the file's own value wins over the table


class Interrupted(BaseException):
    """Stands for Ctrl-C or a kill in the middle of an import."""


def _import(out, files):
    return write_mesh_dataset(out, files, x=["kappa"], y=["T"], splits=SPLITS, progress=False)


def _interrupt_once(monkeypatch, when) -> list:
    """Make the import raise :class:`Interrupted` once, before reading the file for which
    ``when(path, reads so far)`` is true; returns the list of files read (kept up to date)."""
    real, calls, stopped = meshdataset.read_sample, [], []

    def interrupted(*args, **kwargs):
        calls.append(args[0])
        if not stopped and when(args[0], len(calls)):
            stopped.append(True)
            raise Interrupted
        return real(*args, **kwargs)

    monkeypatch.setattr(meshdataset, "read_sample", interrupted)
    return calls


def test_an_interrupted_import_resumes(files, tmp_path, monkeypatch):
    reference = MeshDataset(_import(tmp_path / "ref.h5", files))
    calls = _interrupt_once(monkeypatch, lambda path, reads: reads == 3)
    out = tmp_path / "d.h5"
    with pytest.raises(Interrupted):
        _import(out, files)
    assert not out.exists() and (tmp_path / "d.h5.partial").exists()
    calls.clear()
    _import(out, files)
    assert [c.name for c in calls] == ["s2.vtu", "s3.vtu", "s4.vtu"]  # the first two were kept
    resumed = MeshDataset(out)
    for i in range(5):
        assert torch.equal(resumed[i].y, reference[i].y) and torch.equal(resumed[i].pos, reference[i].pos)
    with pytest.raises(ConfigError, match="exists"):
        _import(out, files)


def test_a_sample_cut_short_by_a_kill_is_written_again(files, tmp_path, monkeypatch):
    reference = MeshDataset(_import(tmp_path / "ref.h5", files))
    _interrupt_once(monkeypatch, lambda path, reads: path.name == "s2.vtu")
    out = tmp_path / "d.h5"
    with pytest.raises(Interrupted):
        _import(out, files)
    with h5py.File(tmp_path / "d.h5.partial", "r+") as fh:  # as a kill in the middle of samples leaves it
        g = fh["meshes/000001"]
        g["x"].resize(g["x"].shape[0] + 1, axis=0)  # a row begun, its other parts not
        fh["meshes"].create_group("000002").create_dataset("points", data=np.zeros((3, 2)))  # a mesh begun
    _import(out, files)
    resumed = MeshDataset(out)
    for i in range(5):
        assert torch.equal(resumed[i].x, reference[i].x) and torch.equal(resumed[i].pos, reference[i].pos)


def test_splits_must_cover_every_sample_once(files, tmp_path):
    with pytest.raises(ConfigError, match="exactly once"):
        write_mesh_dataset(tmp_path / "d.h5", files, x=["kappa"], y=["T"],
                           splits={"train": [0, 1], "val": [1, 2, 3, 4]}, progress=False)


def test_version_one_files_still_read_and_each_reader_names_the_other(tmp_path, files):
    from geoattn.cli.main import main

    old = tmp_path / "v1.h5"
    assert main(["generate", "--mesh", "train=meshes/square_irregular.vtu", "--n", "2", "--out", str(old),
                 "--no-progress"]) == 0
    assert dataset_version(old) == 1
    v1 = DarcyDataset(old)
    assert len(v1) == 2 and v1[0].x.shape == (v1[0].num_nodes, 1)
    with pytest.raises(DatasetFileError, match="version 1.*DarcyDataset"):
        MeshDataset(old)
    new = write_mesh_dataset(tmp_path / "d.h5", files, x=["kappa"], y=["T"],
                             splits={"train": list(range(5))}, progress=False)
    with pytest.raises(DatasetFileError, match="version 2.*MeshDataset"):
        DarcyDataset(new)


class _Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.scale = torch.nn.Parameter(torch.ones(()))

    def forward(self, x, mesh):
        return self.scale * x[:, :1]


def test_cross_mesh_report_refuses_unequal_sample_sets(files, tmp_path):
    out = write_mesh_dataset(tmp_path / "d.h5", files, x=["kappa"], y=["T"], splits=SPLITS, progress=False)
    ds = MeshDataset(out)
    with pytest.raises(ValueError, match=r"'a' 3, 'b' 2.*same samples"):
        cross_mesh_report({"m": _Model()}, {"a": [ds[0], ds[1], ds[2]], "b": [ds[3], ds[4]]})
    report = split_report({"m": _Model()}, {"train": MeshDataset(out, "train"), "holes": MeshDataset(out, "holes")})
    assert list(report.nodes) == ["train", "holes"] and len(report.errors["m"]["train"]) == 3
    sample = ds[4]
    e, w = sample.x[:, 0] - sample.y[:, 0], sample.weight
    expected = torch.sqrt((w * e**2).sum() / (w * sample.y[:, 0] ** 2).sum())
    assert report.mean("m", "holes") == pytest.approx(float(expected), rel=1e-5)
    assert "holes" in report.table()


def test_reader_options_reach_the_mesh_reader(files, tmp_path):
    mesh = meshio.read(files[0])
    cells = mesh.cells_dict["triangle"][:, [0, 2, 1]]  # every cell inverted
    meshio.write(files[0], meshio.Mesh(mesh.points, [("triangle", cells)], point_data=mesh.point_data))
    with pytest.raises(Exception, match=r"s0\.vtu"):
        write_mesh_dataset(tmp_path / "d.h5", files, x=["kappa"], y=["T"],
                           splits={"train": list(range(5))}, progress=False)
    out = write_mesh_dataset(tmp_path / "d.h5", files, x=["kappa"], y=["T"], splits={"train": list(range(5))},
                             options={"reorient": True}, progress=False)
    assert MeshDataset(out)[0].weight.min() > 0


def test_merge_duplicates_option_when_the_reader_has_it(files, tmp_path):
    if "merge_duplicates" not in meshdataset.reader_options():
        pytest.skip("this geoattn's mesh reader has no merge_duplicates option yet")
    out = write_mesh_dataset(tmp_path / "d.h5", files, x=["kappa"], y=["T"], splits={"train": list(range(5))},
                             options={"merge_duplicates": 1e-12}, progress=False)
    assert len(MeshDataset(out)) == 5


def _resolve(item, fh) -> np.ndarray:
    """The values an XDMF ``<DataItem>`` names: an HDF5 dataset, or a hyperslab of one."""
    if item.get("ItemType") == "HyperSlab":
        spec, source = item.findall("DataItem")
        start, stride, count = np.array(spec.text.split(), dtype=int).reshape(3, -1)
        values = _resolve(source, fh)
        index = tuple(slice(a, a + s * c, s) for a, s, c in zip(start, stride, count))
        out = values[index]
        assert out.shape == tuple(int(d) for d in item.get("Dimensions").split())
        return out
    name, _, inside = item.text.partition(":")
    assert name == fh.filename.rsplit("/", 1)[-1]
    values = fh[inside][:]
    assert values.shape == tuple(int(d) for d in item.get("Dimensions").split())
    return values


def test_the_paraview_companion_holds_every_sample_on_its_mesh_with_named_fields(files, tmp_path):
    """An import writes <stem>.xdmf: step i is sample i, on its mesh, its fields by name; each
    reference resolves in the dataset file to what MeshDataset reads."""
    import xml.etree.ElementTree as ET

    out = write_mesh_dataset(tmp_path / "d.h5", files, x=["kappa"], y=["T", "q"], params=["load"],
                             splits=SPLITS, tables=_tables(files), progress=False)
    root = ET.parse(tmp_path / "d.xdmf").getroot()
    steps = root.findall("./Domain/Grid/Grid")
    ds = MeshDataset(out, dtype=torch.float64)
    assert len(steps) == len(ds) == 5
    with h5py.File(out) as fh:
        for i, step in enumerate(steps):
            sample = ds[i]
            assert step.find("Time").get("Value") == str(i)
            assert step.find("Topology").get("TopologyType") == "Triangle"
            np.testing.assert_array_equal(_resolve(step.find("Topology/DataItem"), fh), sample.cells.numpy())
            np.testing.assert_array_equal(_resolve(step.find("Geometry/DataItem"), fh), sample.pos.numpy())
            fields = {a.get("Name"): _resolve(a.find("DataItem"), fh).reshape(-1) for a in step.findall("Attribute")}
            assert sorted(fields) == ["T", "kappa", "q", "weight"]
            np.testing.assert_array_equal(fields["weight"], sample.weight.numpy())
            np.testing.assert_array_equal(fields["kappa"], sample.x[:, 0].numpy())
            np.testing.assert_array_equal(np.c_[fields["T"], fields["q"]], sample.y.numpy())
            assert step.find("Information").attrib == {"Name": "load", "Value": repr(float(i))}
