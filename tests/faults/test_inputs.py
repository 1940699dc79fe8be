"""A corpus of bad inputs (weights, cells, mesh files, targets), each tried on every path where it
matters: the sample validator, ``Trainer.fit`` with an output folder, ``NormalizedOperator.forward``,
the losses and ``read_mesh``. Each must raise its typed error with a message that names the
problem and where it is, and write nothing."""

import re
from xml.etree.ElementTree import ParseError

import pytest
import torch
from torch_geometric.data import Batch

import geoattn
from geoattn.mesh import Mesh, families, from_meshio, read_mesh, validate_sample, write_mesh
from geoattn.models import build_model
from geoattn.train import NormalizedOperator, Trainer, relative_h1, relative_l2

BAD = 2  # the corrupted sample's index in the training set


def _samples(n_samples=4):
    base = from_meshio(families.unit_square(4, "irregular"))  # 25 nodes, 32 triangles
    out = []
    for k in range(n_samples):
        d = base.clone()
        d.x = torch.sin((k + 1) * d.pos[:, :1])
        d.y = d.x * (1 + d.pos[:, 1:])
        out.append(d)
    return out


def _operator():
    return NormalizedOperator(build_model("tno", in_channels=1, out_channels=1, width=8, depth=1))


def _set(key, index, value):
    def corrupt(d, offset=0):  # offset: the corrupted sample's first node in a batch
        v = d[key].clone()
        v[offset + index] = value
        d[key] = v
    return corrupt


def _replace(key, make):
    def corrupt(d, offset=0):
        d[key] = make(d[key])
    return corrupt


def _zero_weights(d, offset=0):
    w = d.weight.clone()
    w[offset:] = 0
    d.weight = w


def _raises(error, fragment, run):
    with pytest.raises(error, match=re.escape(fragment)):
        run()


# --- weights: name -> (corrupt, error, message for one sample, message for it as graph 1 of two)
WEIGHTS = {
    "negative": (_set("weight", 3, -0.1), geoattn.WeightError, "weight 3 is negative (-0.1)",
                 "weight 28 (node 3 of graph 1) is negative (-0.1)"),
    "nan": (_set("weight", 2, float("nan")), geoattn.WeightError, "weight 2 is not finite (nan)",
            "weight 27 (node 2 of graph 1) is not finite (nan)"),
    "inf": (_set("weight", 5, float("inf")), geoattn.WeightError, "weight 5 is not finite (inf)",
            "weight 30 (node 5 of graph 1) is not finite (inf)"),
    "zero total": (_zero_weights, geoattn.WeightError, "the sample has total weight 0 (25 nodes, every weight zero)",
                   "graph 1 has total weight 0 (25 nodes, every weight zero)"),
    "column shape": (_replace("weight", lambda w: w[:, None]), geoattn.WeightError,
                     "weights must be a 1-D array [N], got shape (25, 1)", "got shape (50, 1)"),
    "short": (_replace("weight", lambda w: w[:-1]), geoattn.WeightError, "got 24 weights for 25 nodes",
              "got 49 weights for 50 nodes"),
}


@pytest.mark.parametrize("name", WEIGHTS)
def test_bad_weights_validator(name):
    corrupt, error, message, _ = WEIGHTS[name]
    d = _samples(1)[0]
    corrupt(d)
    _raises(error, message, lambda: validate_sample(d))


@pytest.mark.parametrize("name", WEIGHTS)
def test_bad_weights_trainer_writes_nothing(tmp_path, name):
    corrupt, error, message, _ = WEIGHTS[name]
    samples = _samples()
    corrupt(samples[BAD])
    op = _operator()
    trainer = Trainer(op, tmp_path / "run", epochs=1, progress=False)
    _raises(error, f"training sample {BAD}: {message}", lambda: trainer.fit(samples))
    assert not (tmp_path / "run").exists()
    assert torch.equal(op.y_normalizer.mean, torch.zeros(1, dtype=torch.float64))  # not fitted


@pytest.mark.parametrize("name", WEIGHTS)
def test_bad_weights_forward(name):
    corrupt, error, _, message = WEIGHTS[name]
    batch = Batch.from_data_list(_samples(2))
    corrupt(batch, offset=25)
    op = _operator()
    _raises(error, message, lambda: op(batch.x, batch.pos, batch.weight, batch.batch))


def test_forward_batch_vector_of_wrong_length():
    d = _samples(1)[0]
    _raises(geoattn.FieldLengthError, "batch must be an integer tensor [25] (the graph of each node), got "
            "torch.int64 of shape (24,)", lambda: _operator()(d.x, d.pos, d.weight, torch.zeros(24, dtype=torch.long)))


# --- cells: name -> (cells of the 25-node, 32-triangle sample -> bad cells, error, message)
def _with(c, index, value):
    c = c.clone()
    c[index] = value
    return c


def _repeat(k, flip):
    return lambda c: torch.cat([c, c[k:k + 1].flip(1) if flip else c[k:k + 1]])


CELLS = {
    "out of range": (lambda c: _with(c, (2, 1), 25), geoattn.CellIndexError, "cell 2 refers to node indices"),
    "negative index": (lambda c: _with(c, (0, 2), -1), geoattn.CellIndexError, "cell 0 refers to node indices"),
    "repeated": (_repeat(1, False), geoattn.DuplicateCellError, "cell 32 (nodes {}) repeats cell 1"),
    "repeated reversed": (_repeat(1, True), geoattn.DuplicateCellError, "cell 32 (nodes {}) repeats cell 1"),
    "wrong arity": (lambda c: c[:, :2], geoattn.DimensionError, "triangle cells must have shape [M, 3], got (32, 2)"),
    "float indices": (lambda c: c.double(), geoattn.CellIndexError, "cell indices must be integers"),
}


def _bad_cells(name):
    make, error, fragment = CELLS[name]
    samples = _samples()
    samples[BAD].cells = make(samples[BAD].cells)
    return samples, error, fragment.format(samples[BAD].cells[-1].tolist())


@pytest.mark.parametrize("check_mesh", [True, False], ids=["mesh", "sample"])
@pytest.mark.parametrize("name", CELLS)
def test_bad_cells_validator(name, check_mesh):
    samples, error, fragment = _bad_cells(name)
    _raises(error, fragment, lambda: validate_sample(samples[BAD], check_mesh=check_mesh))


@pytest.mark.parametrize("name", CELLS)
def test_bad_cells_trainer_writes_nothing(tmp_path, name):
    samples, error, fragment = _bad_cells(name)
    trainer = Trainer(_operator(), tmp_path / "run", epochs=1, h1=True, progress=False)
    _raises(error, f"training sample {BAD}: {fragment}", lambda: trainer.fit(samples))
    assert not (tmp_path / "run").exists()


def test_out_of_range_cells_with_reorient_are_a_typed_error():
    mesh = families.unit_square(3)
    mesh.cells[0].data[1, 2] = 99
    _raises(geoattn.CellIndexError, "cell 1 refers to node indices", lambda: from_meshio(mesh, reorient=True))


# --- the rest of a training sample: targets, missing fields, channels
@pytest.mark.parametrize("where, corrupt, h1, error, fragment", [
    ("training", _replace("y", torch.zeros_like), False, geoattn.ZeroNormError,
     f"training sample {BAD}: the target has squared L2 norm 0"),
    ("training", _set("y", 4, float("nan")), False, geoattn.NonFiniteError,
     f"training sample {BAD}: field 'y' is not finite at row 4"),
    ("training", lambda d: delattr(d, "cells"), True, geoattn.FieldLengthError,
     f"training sample {BAD}: has no 'cells'; training needs 'x', 'y', 'weight', 'cells'"),
    ("training", lambda d: delattr(d, "y"), False, geoattn.FieldLengthError, f"training sample {BAD}: has no 'y'; training needs 'x', 'y', 'weight'"),
    ("training", _replace("x", lambda x: x.repeat(1, 2)), False, geoattn.ChannelError,
     f"training sample {BAD}: TNO expects 1 input channel(s)"),
    ("validation", _set("weight", 7, -1.0), False, geoattn.WeightError,
     f"validation sample {BAD}: weight 7 is negative"),
], ids=["zero target", "nan target", "h1 without cells", "no target", "channels", "validation set"])
def test_bad_training_sample_writes_nothing(tmp_path, where, corrupt, h1, error, fragment):
    train, val = _samples(), _samples()
    corrupt((train if where == "training" else val)[BAD])
    trainer = Trainer(_operator(), tmp_path / "run", epochs=1, h1=h1, progress=False)
    _raises(error, fragment, lambda: trainer.fit(train, val))
    assert not (tmp_path / "run").exists()


# --- losses: a target of zero norm has no relative error
@pytest.mark.parametrize("case, error, fragment", [
    ("l2", geoattn.ZeroNormError, "the target of sample 1 has squared L2 norm 0, so the relative error is undefined"),
    ("h1", geoattn.ZeroNormError, "the target of sample 1 has squared H1 norm 0"),
    ("zero weights", geoattn.ZeroNormError, "the target of sample 1 has squared L2 norm 0"),
    ("negative weights", geoattn.ZeroNormError, "the target of sample 1 has squared L2 norm -"),
    ("nan target", geoattn.NonFiniteError, "the target of sample 1 has squared L2 norm nan"),
    ("one sample", geoattn.ZeroNormError, "the target has squared L2 norm 0"),
])
def test_loss_of_an_undefined_ratio(case, error, fragment):
    b = Batch.from_data_list(_samples(2))
    graph1 = b.batch == 1
    if case in ("l2", "h1"):
        b.y[graph1] = 0
    elif case == "nan target":
        b.y[graph1.nonzero()[3]] = float("nan")
    else:
        b.weight[graph1] *= {"zero weights": 0, "negative weights": -1}.get(case, 1)
    pred = b.y + 0.1
    mesh = Mesh(b.pos, b.weight, b.cells, batch=b.batch)
    if case == "h1":
        run = lambda: relative_h1(pred, b.y, mesh)  # noqa: E731
    elif case == "one sample":
        run = lambda: relative_l2(torch.ones(5, 1), torch.zeros(5, 1), Mesh(torch.rand(5, 2), torch.ones(5)))  # noqa: E731
    else:
        run = lambda: relative_l2(pred, b.y, mesh)  # noqa: E731
    _raises(error, fragment, run)


# --- mesh files meshio cannot read: name -> (write the file, error, message, meshio's chained cause)
def _good(path, ext=".vtu"):
    write_mesh(path.with_name("good" + ext), _samples(1)[0])
    return path.with_name("good" + ext).read_bytes()


def _write(make):
    return lambda path: path.write_bytes(make(path))


FILES = {
    "empty.vtu": (_write(lambda p: b""), geoattn.MeshFileError,
                  "(the file is empty); meshio: Couldn't read file", SystemExit),
    "empty.msh": (_write(lambda p: b""), geoattn.MeshFileError, "(the file is empty); meshio: ValueError", ValueError),
    "empty.xdmf": (_write(lambda p: b""), geoattn.MeshFileError, "(the file is empty); meshio: ParseError", ParseError),
    "cut.vtu": (_write(lambda p: _good(p)[:600]), geoattn.MeshFileError,
                "(600 bytes: meshio could not parse it; a damaged or truncated file, not a .vtu file, or a part of the format meshio does not read); meshio: Couldn't read file", SystemExit),
    "cut.msh": (_write(lambda p: _good(p, ".msh")[:900]), geoattn.MeshFileError,
                "(900 bytes: meshio could not parse it; a damaged or truncated file, not a .msh file, or a part of the format meshio does not read); meshio: ValueError: cannot reshape", ValueError),
    "garbage.vtu": (_write(lambda p: bytes(range(256)) * 4), geoattn.MeshFileError,
                    "(1024 bytes: meshio could not parse it; a damaged or truncated file, not a .vtu file", SystemExit),
    "garbage.msh": (_write(lambda p: bytes(range(255, -1, -1)) * 4), geoattn.MeshFileError,
                    "meshio: UnicodeDecodeError", UnicodeDecodeError),
    "mesh.txt": (_write(_good), geoattn.MeshFileError, "meshio knows no format for the extension '.txt'", None),
    "folder.vtu": (lambda path: path.mkdir(), geoattn.MeshFileError, "folder.vtu is a folder, not a mesh file", None),
    "missing.vtu": (lambda path: None, FileNotFoundError, "no mesh file at", None),
}


@pytest.mark.parametrize("name", FILES)
def test_bad_mesh_file(tmp_path, capsys, name):
    write, error, fragment, cause = FILES[name]
    path = tmp_path / name
    write(path)
    before = sorted(tmp_path.iterdir())
    with pytest.raises(error, match=re.escape(fragment)) as info:
        read_mesh(path)
    assert str(path) in str(info.value)
    assert type(info.value.__cause__) is cause if cause is not None else info.value.__cause__ is None
    assert sorted(tmp_path.iterdir()) == before
    assert capsys.readouterr() == ("", "")  # meshio's printing does not reach the console


def test_invalid_mesh_in_a_readable_file_names_the_file(tmp_path):
    d = _samples(1)[0]
    d.cells = torch.cat([d.cells, d.cells[:1]])
    write_mesh(tmp_path / "repeat.vtu", d)
    _raises(geoattn.DuplicateCellError, f"{tmp_path / 'repeat.vtu'}: cell 32 (nodes [", lambda: read_mesh(tmp_path / "repeat.vtu"))


def test_every_error_here_is_typed():
    kinds = {entry[1] for entry in [*WEIGHTS.values(), *CELLS.values()]}
    kinds |= {geoattn.MeshFileError, geoattn.ZeroNormError, geoattn.DuplicateCellError}
    assert all(issubclass(k, geoattn.GeoattnError) and issubclass(k, ValueError) for k in kinds)
