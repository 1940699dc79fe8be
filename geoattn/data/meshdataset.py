"""Dataset files of version 2: samples on shared meshes or each on its own, several named fields,
per-sample global parameters and named splits; their writer (from users' mesh files) and reader.

Layout (``format = "geoattn-dataset"``, ``format_version = 2``; version 1 is
:mod:`geoattn.data.dataset`, still read by :class:`~geoattn.data.DarcyDataset`):

- root attributes: ``format``, ``format_version``, ``geoattn_version``, ``created``, ``n`` (the
  number of samples), ``x_names``, ``y_names``, ``param_names`` (JSON lists: the input channels,
  the target channels and the global parameters, in order), ``splits`` (JSON list of the split
  names: ``train``, ``val`` and the test sets), ``source`` (JSON of what the file was made from,
  so that a resumed import refuses other inputs), ``frame`` (JSON ``[origin, scale]`` subtracted
  from the files' coordinates before they were stored, ``--origin`` of ``geoattn import``; ``null``
  or absent: none, the coordinates as the files hold them);
- ``done [n]`` (uint8): samples written (an interrupted import resumes from them);
- ``samples/``: ``mesh [n]`` (the number of the sample's mesh), ``row [n]`` (its row in that
  mesh's fields), ``params [n, P]`` (float64), ``name [n]`` (the file the sample came from);
- ``meshes/<number>/``: ``points [N, d]``, ``cells [M, V]``, ``weight [N]`` (lumped), attributes
  ``cell_type``, ``checksum`` (CRC-32 of points, cells and weights) and ``mesh_hash``; its samples'
  fields ``x [k, N, C_in]``, ``y [k, N, C_out]``, ``sample [k]`` and ``checksum [k]`` (CRC-32 of
  each sample's ``x``, ``y`` and ``params``). Identical meshes (the same nodes and cells, bit for
  bit) are stored once and shared by their samples; a dataset whose mesh changes per sample has
  one mesh per sample;
- ``splits/<name> [m]`` (int64): the sample indices of each split.

Writes are atomic and resumable: the file is written as ``<name>.partial`` beside its final place
under the lock of the final file (:func:`geoattn.locking.hold`), a sample's fields reach the file
before its completion flag, and only a complete file is renamed to its final name. A bad input
file (unreadable, a missing field, an invalid mesh, a missing parameter) stops the import with an
error naming the file, and the partial file is removed: nothing half-written remains. An
interrupted import (Ctrl-C, ``SIGKILL``) leaves the partial file, and the same call resumes from
it.
"""

from __future__ import annotations

import copy
import datetime
import inspect
import json
import os
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import torch

from .. import __version__
from ..errors import (
    ConfigError,
    DatasetFileError,
    FieldLengthError,
    GeoattnError,
    InputFilesError,
    OutputError,
)
from ..atomic import guarded_h5
from ..locking import hold
from ..mesh import MeshData
from ..mesh.mesh import Mesh
from ..mesh.samples import DEFAULT_MAX_BYTES, MeshStore
from ..mesh.io import cast_positions, from_meshio, read_meshio
from ..mesh.validation import checked_number, located, validate_sample
from ..mesh.weights import cast_weights
from ..optional import progress as progress_bar, require
from .dataset import FORMAT, FileDataset, _read, crc32, mesh_hash, open_dataset_file
from .xdmf import write_mesh_xdmf

h5py = require("h5py", "data", "dataset files")

MESH_FORMAT_VERSION = 2
#: the split names every version-2 file may hold besides its test sets
TRAIN, VAL = "train", "val"
#: keyword arguments of :func:`~geoattn.mesh.from_meshio` that an import passes through
READER_OPTIONS = ("merge_duplicates", "reorient", "cell_block", "triangulate", "linearise", "cell_to_point",
                  "origin")


def reader_options() -> tuple[str, ...]:
    """The options of :data:`READER_OPTIONS` that this geoattn's mesh reader takes."""
    params = inspect.signature(from_meshio).parameters
    return tuple(k for k in READER_OPTIONS if k in params)


def _json_attr(fh, key: str):
    try:
        return json.loads(str(fh.attrs[key]))
    except (KeyError, json.JSONDecodeError) as err:
        raise DatasetFileError(f"{fh.filename}: attribute {key!r} is missing or damaged") from err


def _param_value(path: Path, name: str, field_data: Mapping, table: Mapping | None) -> float:
    if name in field_data:
        value = np.asarray(field_data[name]).reshape(-1)
        if value.size != 1:
            raise FieldLengthError(f"{path}: parameter {name!r} in the file's field_data has {value.size} "
                                   "values, expected one number")
        value = value[0]
    elif table is not None and name in table:
        value = table[name]
    else:
        where = "its field_data" + (" nor its row of the parameter table" if table is not None else
                                    " (and no parameter table lists the file)")
        raise FieldLengthError(f"{path}: no parameter {name!r} in {where}")
    try:
        value = float(value)
    except (TypeError, ValueError) as err:
        raise FieldLengthError(f"{path}: parameter {name!r} is {value!r}, not a number") from err
    if not np.isfinite(value):
        raise FieldLengthError(f"{path}: parameter {name!r} is {value}, not a finite number")
    return value


def read_sample(path: str | Path, x: Sequence[str], y: Sequence[str], params: Sequence[str] = (),
                table: Mapping[str, float] | None = None, **options) -> tuple[MeshData, np.ndarray]:
    """Read one simulation file: the validated sample (float64, lumped weights, ``x`` and ``y``
    stacked from the named point fields) and its parameters ``[P]`` (from the file's
    ``field_data``, else from ``table``). Every error names the file."""
    path = Path(path)
    mesh = read_meshio(path)
    with located(str(path)):
        data = from_meshio(mesh, x=list(x), y=list(y), dtype=torch.float64, **options)
    values = np.array([_param_value(path, p, mesh.field_data, table) for p in params], dtype=np.float64)
    return data, values


#: h5py filters of the field and mesh datasets: lossless (gzip after a byte shuffle), for meshes of
#: at least :data:`COMPRESS_FROM` nodes (on smaller ones the filters' overhead outweighs the saving)
COMPRESSION = {"compression": "gzip", "compression_opts": 4, "shuffle": True}
COMPRESS_FROM = 1024


def _grown(group, name: str, shape: tuple, dtype: str, compressed: bool = False):
    return group.create_dataset(name, shape=(0, *shape), maxshape=(None, *shape), dtype=dtype,
                                chunks=(1, *shape) if shape else (1024,), **(COMPRESSION if compressed else {}))


def _put(dataset, row: int, value) -> None:
    if dataset.shape[0] <= row:
        dataset.resize(row + 1, axis=0)
    dataset[row] = value


class _Writer:
    """Append samples to an open version-2 file, sharing identical meshes.

    On a resumed file, a mesh whose writing was cut short (no ``mesh_hash`` yet) is removed: no
    flagged sample refers to it, as a sample is flagged only after its mesh and fields are written.
    """

    def __init__(self, fh):
        self.fh = fh
        meshes = fh["meshes"]
        for key in [k for k, g in meshes.items() if "mesh_hash" not in g.attrs]:
            del meshes[key]
        self.by_hash = {str(g.attrs["mesh_hash"]): int(k) for k, g in meshes.items()}
        self.next = 1 + max(self.by_hash.values(), default=-1)

    def _mesh(self, data: MeshData, cx: int, cy: int) -> tuple[int, object]:
        points = data.pos.numpy()
        cells = data.cells.numpy() if getattr(data, "cells", None) is not None else np.zeros((0, 1), np.int64)
        key = mesh_hash(points, cells)
        if key in self.by_hash:
            number = self.by_hash[key]
            return number, self.fh["meshes"][f"{number:06d}"]
        number, self.next = self.next, self.next + 1
        g = self.fh["meshes"].create_group(f"{number:06d}")
        weight = data.weight.numpy()
        compressed = len(points) >= COMPRESS_FROM
        for name, values in (("points", points), ("cells", cells), ("weight", weight)):
            g.create_dataset(name, data=values, **(COMPRESSION if compressed else {}))
        for name, channels in (("x", cx), ("y", cy)):
            _grown(g, name, (len(points), channels), "f8", compressed=compressed)
        _grown(g, "sample", (), "i8")
        _grown(g, "checksum", (), "u4")
        g.attrs.update(cell_type=str(getattr(data, "cell_type", "") or ""), mesh_hash=key,
                       checksum=crc32(points, cells, weight))
        self.by_hash[key] = number
        return number, g

    def write(self, index: int, data: MeshData, params: np.ndarray) -> None:
        x, y = data.x.numpy(), data.y.numpy()
        number, g = self._mesh(data, x.shape[1], y.shape[1])
        row = max(g[k].shape[0] for k in ("x", "y", "sample", "checksum"))  # past a row cut short
        for key, value in (("x", x), ("y", y), ("sample", index), ("checksum", crc32(x, y, params))):
            _put(g[key], row, value)
        s = self.fh["samples"]
        s["mesh"][index], s["row"][index] = number, row
        if params.size:
            s["params"][index] = params
        self.fh.flush()  # the values reach the file before their flag
        self.fh["done"][index] = 1
        self.fh.flush()


def _create(tmp: Path, files: Sequence[Path], x, y, params, splits, source: dict, frame) -> None:
    with guarded_h5(tmp, "w", f"create {tmp.with_name(tmp.name.removesuffix('.partial'))}") as (fh, _):
        n = len(files)
        fh.attrs.update(format=FORMAT, format_version=MESH_FORMAT_VERSION, geoattn_version=__version__,
                        created=datetime.datetime.now(datetime.timezone.utc).isoformat(), n=n,
                        x_names=json.dumps(list(x)), y_names=json.dumps(list(y)),
                        param_names=json.dumps(list(params)), splits=json.dumps(list(splits)),
                        source=json.dumps(source, sort_keys=True), frame=json.dumps(frame))
        fh.create_dataset("done", shape=(n,), dtype="u1", fillvalue=0)
        fh.create_group("meshes")
        s = fh.create_group("samples")
        s.create_dataset("mesh", shape=(n,), dtype="i8", fillvalue=-1)
        s.create_dataset("row", shape=(n,), dtype="i8", fillvalue=-1)
        s.create_dataset("params", shape=(n, len(params)), dtype="f8")
        s["name"] = np.array([str(f) for f in files], dtype=h5py.string_dtype())
        g = fh.create_group("splits")
        for name, indices in splits.items():
            g[name] = np.asarray(indices, dtype=np.int64)


def write_mesh_dataset(path: str | Path, files: Sequence[str | Path], *, x: Sequence[str],
                       y: Sequence[str], params: Sequence[str] = (),
                       splits: Mapping[str, Sequence[int]],
                       tables: Mapping[str, Mapping[str, float]] | None = None,
                       options: Mapping | None = None, progress: bool = True,
                       overwrite: bool = False) -> Path:
    """Build a version-2 dataset file at ``path`` from simulation files meshio reads, and its
    ParaView companion ``<stem>.xdmf`` (:func:`~geoattn.data.xdmf.write_mesh_xdmf`).

    Args:
        path: the ``.h5`` file to write (its folder is created).
        files: one mesh file per sample, in sample order.
        x, y: names of the point fields stacked as input and target channels.
        params: names of the per-sample global parameters (from each file's ``field_data``, else
            from ``tables``).
        splits: sample indices by split name (``train``, ``val``, test sets); every sample in
            exactly one split.
        tables: parameter values by file (its path as given, or its name) and name.
        options: keyword arguments for :func:`~geoattn.mesh.from_meshio` (``reorient``, ...);
            an ``origin`` is subtracted from every file's coordinates (in float64) and recorded as
            the file's ``frame``, which :class:`MeshDataset` gives its samples (``data.frame``).
        progress: show a progress bar. (default: ``True``)
        overwrite: replace an existing file at ``path``. (default: ``False``)

    Raises:
        ConfigError: no files, overlapping or incomplete splits, a field named twice, an existing
            file without ``overwrite``; nothing is written.
        MeshError, MeshFileError, FieldLengthError: a bad input file, named in the message; the
            partial file is removed and nothing is written.
        InputFilesError: several bad input files: after the first, the others are still read (and
            nothing more written), and every bad one is named in the message.
        LockError: another process is writing ``path``.
        KeyboardInterrupt: the partial file is kept, and the same call resumes from it.
    """
    path, files = Path(path), [Path(f) for f in files]
    x, y, params = list(x), list(y), list(params)
    options = dict(options or {})
    if not files:
        raise ConfigError("no mesh files to import")
    if not x or not y:
        raise ConfigError("name at least one input field (x) and one target field (y)")
    names = x + y + params
    if len(set(names)) != len(names):
        raise ConfigError(f"a name is given twice among the fields and parameters {names}")
    taken = sorted(i for idx in splits.values() for i in idx)
    if taken != list(range(len(files))):
        raise ConfigError("the splits must hold every sample exactly once")
    if TRAIN not in splits or not len(splits[TRAIN]):
        raise ConfigError("the train split is empty")
    if path.is_dir():
        raise OutputError(f"{path} is a folder; give a file name such as {path / 'data.h5'}")
    tables = tables or {}
    if options.get("origin") is not None:
        options["origin"] = [checked_number("origin", v, positive=False) for v in np.ravel(options["origin"])]
    frame = None if options.get("origin") is None else [options["origin"], 1.0]  # (origin, scale) of the samples
    source = {"files": [[str(f), *_stamp(f)] for f in files], "x": x, "y": y, "params": params,
              "splits": {k: [int(i) for i in v] for k, v in splits.items()},
              "options": {k: v for k, v in sorted(options.items())}}
    tmp = path.with_name(path.name + ".partial")
    with hold(path, what="dataset file"):
        if path.exists() and not overwrite:
            raise ConfigError(f"{path} exists; give --overwrite to replace it, or another output file")
        if tmp.exists() and not _same_source(tmp, source):
            tmp.unlink()  # an interrupted import of other inputs: start again
        try:
            if not tmp.exists():
                _create(tmp, files, x, y, params, splits, source, frame)
            advice = "; nothing is kept: make room and run the same command again"
            with guarded_h5(tmp, "r+", f"write to {path}", advice) as (fh, guard):
                done = fh["done"][:]
                writer = _Writer(fh)
                with progress_bar(total=len(files), initial=int(done.sum()), enabled=progress,
                                  desc=path.name, unit="file") as bar:
                    bad: list[BaseException] = []  # after a bad file the others are read, not written
                    for index in np.flatnonzero(done == 0):
                        f = files[index]
                        table = tables.get(str(f), tables.get(f.name))
                        try:
                            data, values = read_sample(f, x, y, params, table, **options)
                        except (GeoattnError, FileNotFoundError) as err:
                            bad.append(err)
                        if not bad:
                            writer.write(int(index), data, values)
                            guard.check(f"write to {path}", advice)  # a full disk stops at this sample
                        bar.update()
                    if len(bad) == 1:
                        raise bad[0]
                    if bad:
                        raise InputFilesError(bad, len(files)) from bad[0]
                fh.attrs["complete"] = True
        except (GeoattnError, OSError, ValueError):
            tmp.unlink(missing_ok=True)  # a bad input: nothing half-written remains
            raise
        with open(tmp, "rb") as fh:
            os.fsync(fh.fileno())
        tmp.replace(path)
        try:
            write_mesh_xdmf(path)
        except OSError as err:
            raise OutputError(f"{path} is complete, but its XDMF companion cannot be written "
                              f"({err.strerror or err}); make room and run geoattn.data.xdmf.write_mesh_xdmf "
                              "on it") from err
    return path


def _stamp(f: Path) -> list:
    try:
        st = f.stat()
    except OSError:
        return [None, None]
    return [st.st_size, st.st_mtime_ns]


def _same_source(tmp: Path, source: dict) -> bool:
    try:
        with h5py.File(tmp, "r") as fh:
            whole = all(k in fh for k in ("done", "meshes", "samples/mesh", "samples/row", "samples/params"))
            return whole and json.loads(str(fh.attrs["source"])) == json.loads(json.dumps(source, sort_keys=True))
    except (OSError, KeyError, ValueError):
        return False


class MeshDataset(FileDataset):
    r"""Lazy reader of a version-2 dataset file: the samples of one split (or all), each a
    :class:`~geoattn.mesh.MeshData` with ``pos``, ``weight``, ``cells``, ``cell_type``,
    ``x [N, C_in]``, ``y [N, C_out]`` and, when the file has global parameters,
    ``params [1, P]`` (one row per sample, so a batch holds ``[B, P]``).

    Meshes are read once (checked against their CRC-32 and mesh hash, and validated): every
    sample names its mesh (``mesh_id``, the mesh's number in the file), and :attr:`meshes` holds
    one :class:`~geoattn.mesh.Mesh` per mesh, made on first use and kept, with the structure
    operators derive from it, from one call to the next (bounded, see ``max_bytes``); fields are read
    one sample at a time and checked against their CRC-32. The HDF5 handle is opened per process, so the dataset works with
    worker processes.

    Args:
        path (str or Path): the dataset file.
        split (str, optional): ``"train"``, ``"val"`` or a test set's name (default ``None``: all
            samples).
        params_as_channels (bool, optional): append the global parameters to ``x`` as constant
            channels, ``x [N, C_in + P]``: how a mesh-agnostic model takes them. (default: ``False``)
        transform (callable, optional): PyG transform applied on access. (default: ``None``)
        dtype (torch.dtype, optional): floating dtype (default: torch's default dtype).
        verify (bool, optional): check each sample's checksum on read. (default: ``True``)
        cache (int, optional): meshes whose nodes a sample read keeps in memory (a worker's
            samples, and the source of :attr:`meshes`). (default: ``64``)
        max_bytes (int, optional): bytes of derived structure :attr:`meshes` keeps
            (:class:`~geoattn.mesh.MeshStore`). (default: 8 GiB)

    Attributes:
        x_names, y_names, param_names: the channel and parameter names.
        splits: the number of samples of each split, by name.
    """

    versions = (MESH_FORMAT_VERSION,)

    def __init__(self, path: str | Path, split: str | None = None, *, params_as_channels: bool = False,
                 transform=None, dtype: torch.dtype | None = None, verify: bool = True, cache: int = 64,
                 max_bytes: int | None = DEFAULT_MAX_BYTES):
        self.path = Path(path)
        self.dtype = dtype or torch.get_default_dtype()
        self.verify, self.params_as_channels = verify, params_as_channels
        self._fh, self._pid = None, None
        self._meshes: OrderedDict[int, MeshData] = OrderedDict()  # bases of the samples read
        self._cache = max(1, cache)
        with open_dataset_file(self.path, versions=(MESH_FORMAT_VERSION,)) as fh:
            self.x_names, self.y_names = _json_attr(fh, "x_names"), _json_attr(fh, "y_names")
            self.param_names = _json_attr(fh, "param_names")
            order = _json_attr(fh, "splits")
            done = _read(self.path, "the completion flags", lambda: fh["done"][:])
            if not np.all(done):
                raise DatasetFileError(f"{self.path} is incomplete: {int(done.sum())} of {len(done)} "
                                       "samples were written")
            indices = {name: _read(self.path, f"split {name!r}", lambda name=name: fh["splits"][name][:])
                       for name in order}
            self.splits = {name: len(v) for name, v in indices.items()}
            if split is not None and split not in indices:
                raise ValueError(f"{self.path} has no split {split!r}; it holds {order}")
            self.split = split
            self._index = indices[split] if split is not None else np.arange(len(done))
            s = fh["samples"]
            self._mesh_of, self._row_of = _read(self.path, "the sample table", lambda: (s["mesh"][:], s["row"][:]))
            self._params = _read(self.path, "the parameters", lambda: s["params"][:])
            self.names = [n.decode() if isinstance(n, bytes) else str(n) for n in s["name"][:]]
            count = len(fh["meshes"])
            frame = json.loads(str(fh.attrs.get("frame", "null")))
            #: the frame ``(origin, scale)`` the samples were read in (``--origin`` of ``geoattn import``), or ``None``
            self.frame = None if frame is None else (tuple(float(v) for v in frame[0]), float(frame[1]))
            self.attrs = {k: (v.item() if hasattr(v, "item") else v) for k, v in fh.attrs.items()}
        self.mesh = split or "all"
        self.meshes = MeshStore(count, load=self._mesh, max_bytes=max_bytes)
        super().__init__(None, transform, log=False)

    @property
    def mesh_ids(self) -> np.ndarray:
        """The mesh number of every sample (of this split, in order)."""
        return self._mesh_of[self._index[np.asarray(self.indices(), dtype=np.int64)]]

    @property
    def sample_names(self) -> list[str]:
        """The name (source file) of every sample of this split, in order."""
        return [self.names[int(self._index[i])] for i in self.indices()]

    def _mesh(self, number: int) -> Mesh:
        data = self._base(number)
        cells = getattr(data, "cells", None)
        return Mesh(data.pos, data.weight, cells if torch.is_tensor(cells) else None)

    @property
    def test_sets(self) -> list[str]:
        """Names of the test sets (every split but ``train`` and ``val``)."""
        return [name for name in self.splits if name not in (TRAIN, VAL)]

    @property
    def in_channels(self) -> int:
        return len(self.x_names) + (len(self.param_names) if self.params_as_channels else 0)

    @property
    def out_channels(self) -> int:
        return len(self.y_names)


    def _base(self, number: int) -> MeshData:
        """The nodes, weights and cells of mesh ``number`` as a sample without fields: the
        :class:`~geoattn.mesh.Mesh` of :attr:`meshes` if it is made (its tensors shared), else
        read (the last ``cache`` kept)."""
        if number in self._meshes:
            self._meshes.move_to_end(number)
            return self._meshes[number]
        group = self._file()["meshes"][f"{number:06d}"]
        data = _read(self.path, f"mesh {number}", lambda: self._load_mesh(group, number))
        self._meshes[number] = data
        if len(self._meshes) > self._cache:
            self._meshes.popitem(last=False)
        return data

    def _load_mesh(self, group, number: int) -> MeshData:
        points, cells, weight = group["points"][:], group["cells"][:], group["weight"][:]
        where = f"{self.path}: mesh {number}"
        if crc32(points, cells, weight) != int(group.attrs["checksum"]):
            raise DatasetFileError(f"{where} fails its checksum (corrupted)")
        if mesh_hash(points, cells) != str(group.attrs["mesh_hash"]):
            raise DatasetFileError(f"{where} fails its mesh hash (its nodes or cells changed)")
        with located(where):
            data = MeshData(pos=cast_positions(np.asarray(points, dtype=np.float64), self.dtype),
                            weight=cast_weights(weight, self.dtype))
        if len(cells):
            data.cells = torch.as_tensor(cells, dtype=torch.long)
            data.cell_type = str(group.attrs["cell_type"])
        if self.frame is not None:
            data.frame = self.frame
        with located(where):
            validate_sample(data, check_mesh=False)
        return data

    def len(self) -> int:
        return len(self._index)

    def get(self, idx: int) -> MeshData:
        sample = int(self._index[idx])
        number, row = int(self._mesh_of[sample]), int(self._row_of[sample])
        base = self._base(number)
        group = self._file()["meshes"][f"{number:06d}"]
        x, y, check = _read(self.path, f"sample {sample}",
                            lambda: (group["x"][row], group["y"][row], int(group["checksum"][row])))
        params = self._params[sample]
        if self.verify and crc32(x, y, params) != check:
            raise DatasetFileError(f"{self.path}: sample {sample} ({self.names[sample]}) fails its "
                                   "checksum (corrupted file)")
        data = copy.copy(base)  # the mesh's tensors shared (one Mesh for every sample on it)
        x = torch.as_tensor(x, dtype=self.dtype)  # [N, C_in]
        if len(self.param_names):
            p = torch.as_tensor(params, dtype=self.dtype)
            data.params = p.reshape(1, -1)  # [1, P]
            if self.params_as_channels:
                x = torch.cat([x, p.expand(x.shape[0], -1)], dim=1)  # [N, C_in + P]
        data.x, data.y = x, torch.as_tensor(y, dtype=self.dtype)  # [N, C_out]
        data.mesh_id = number
        return data

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.path.name}, split={self.split!r}, n={len(self)})"


def dataset_version(path: str | Path) -> int:
    """The format version of a dataset file (1: :class:`~geoattn.data.DarcyDataset`, 2:
    :class:`MeshDataset`), after checking its header."""
    with open_dataset_file(path, versions=(1, MESH_FORMAT_VERSION)) as fh:
        return int(fh.attrs["format_version"])


__all__ = ["MESH_FORMAT_VERSION", "MeshDataset", "dataset_version", "read_sample", "reader_options",
           "write_mesh_dataset"]
