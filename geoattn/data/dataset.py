"""Dataset files (HDF5) and their lazy, PyG-compatible reader.

One self-describing file per dataset. Layout (``format = "geoattn-dataset"``, version 1):

- root attributes: ``format``, ``format_version``, ``geoattn_version``, ``recipe`` (JSON of the
  :class:`~geoattn.data.recipe.Recipe`), ``n``, ``seed``, ``created``;
- ``done [n]`` (uint8): samples whose every mesh has been written (generation resumes from it);
- ``meshes/<name>/``: ``points [N, d]``, ``cells [M, V]``, ``weight [N]`` (lumped), attributes
  ``cell_type``, ``checksum`` (CRC-32 of points, cells and weights) and ``mesh_hash``
  (:func:`mesh_hash` of points and cells: a resumed generation, and every read, refuse a changed
  mesh), and the fields ``x [n, N]`` (coefficient at the nodes), ``y [n, N]`` (solution) with
  ``checksum [n]`` (CRC-32 of each sample's rows).

Every read is checked: a file that is not HDF5 or is truncated, a foreign HDF5 file, a newer
format, missing parts, an incomplete generation or a checksum mismatch raise
:class:`~geoattn.errors.DatasetFileError` naming the problem; a mesh whose nodes, cells or
weights are invalid (non-finite, a cell index out of range, a cell listed twice, a negative
weight, zero total weight) raises the :class:`~geoattn.errors.MeshError` of the problem, naming
the file, the mesh and the first offending index.
"""

from __future__ import annotations

import copy
import hashlib
import os
import zlib
from pathlib import Path

import numpy as np
import torch
from torch_geometric.data import Dataset

from ..errors import DatasetFileError, GeoattnError
from ..mesh import MeshData
from ..mesh.mesh import Mesh
from ..mesh.samples import MeshStore
from ..mesh.io import cast_positions
from ..mesh.weights import cast_weights
from ..mesh.validation import located, validate_sample
from ..optional import require
from ..paths import symlink_loop

h5py = require("h5py", "data", "dataset files")

FORMAT = "geoattn-dataset"
FORMAT_VERSION = 1


def crc32(*arrays: np.ndarray) -> int:
    """CRC-32 of the bytes of the arrays (C order), as stored in dataset files."""
    value = 0
    for a in arrays:
        value = zlib.crc32(np.ascontiguousarray(a).tobytes(), value)
    return value


def mesh_hash(points: np.ndarray, cells: np.ndarray) -> str:
    """SHA-256 (hex) of a mesh's content: its node coordinates (float64) and cells (int64), with
    their shapes. Stored per mesh in dataset files, so that resuming a generation can tell that a
    mesh file changed in between."""
    h = hashlib.sha256()
    for array, dtype in ((points, np.float64), (cells, np.int64)):
        array = np.ascontiguousarray(array, dtype=dtype)
        h.update(repr(array.shape).encode())
        h.update(array.tobytes())
    return h.hexdigest()


def open_dataset_file(path: str | Path, mode: str = "r", versions: tuple[int, ...] = (FORMAT_VERSION,)) -> h5py.File:
    """Open and check the header of a dataset file of one of the format ``versions`` (default:
    version 1; version 2 is :mod:`geoattn.data.meshdataset`'s); raises :class:`DatasetFileError`."""
    path = Path(path)
    if not path.exists():
        loop = symlink_loop(path)
        if loop:
            raise DatasetFileError(f"cannot open dataset file {path}: it leads through a symbolic link "
                                   f"loop ({loop})")
        raise FileNotFoundError(f"dataset file {path} not found")
    try:
        fh = h5py.File(path, mode)
    except OSError as err:
        raise DatasetFileError(f"cannot open {path} as HDF5 ({err}): the file is truncated, corrupted, "
                               "of another format, or open elsewhere in a conflicting mode") from err
    fmt = fh.attrs.get("format")
    if fmt != FORMAT:
        fh.close()
        raise DatasetFileError(f"{path} is an HDF5 file but not a geoattn dataset (format attribute "
                               f"{fmt!r}, expected {FORMAT!r})")
    version = int(fh.attrs.get("format_version", -1))
    if version not in versions:
        fh.close()
        known = " or ".join(str(v) for v in versions)
        hint = ("; read it with geoattn.data.MeshDataset" if version == 2 else
                "; read it with geoattn.data.DarcyDataset" if version == 1 else "")
        raise DatasetFileError(f"{path} has dataset format version {version}; this reader takes "
                               f"version {known}{hint}")
    for key in ("done", "meshes") + (("samples", "splits") if version == 2 else ()):
        if key not in fh:
            fh.close()
            raise DatasetFileError(f"{path} is missing its {key!r} entry (damaged file)")
    return fh


def _read(path, what: str, fn):
    try:
        return fn()
    except GeoattnError:
        raise
    except (OSError, KeyError, ValueError) as err:
        raise DatasetFileError(f"{path}: cannot read {what} ({type(err).__name__}: {err})") from err


class FileDataset(Dataset):
    """What the lazy readers of dataset files share: one HDF5 handle per process (``_file()``),
    opened on first use and never pickled, so a reader works with worker processes."""

    #: the format versions the reader opens
    versions: tuple[int, ...] = (FORMAT_VERSION,)

    def _file(self) -> h5py.File:
        if getattr(self, "_fh", None) is None or self._pid != os.getpid():
            self._fh, self._pid = open_dataset_file(self.path, versions=self.versions), os.getpid()
        return self._fh

    def close(self) -> None:
        if getattr(self, "_fh", None) is not None:
            self._fh.close()
            self._fh = None

    def __copy__(self):
        # a copy (a PyG subset of the dataset) shares the handle and the meshes, their structure with them
        new = object.__new__(type(self))
        new.__dict__.update(self.__dict__)
        return new

    def __getstate__(self):
        state = dict(self.__dict__)
        state["_fh"], state["_pid"] = None, None  # h5py handles do not cross processes
        # a worker reads fields, never a mesh: the meshes and their structure stay here
        state.pop("meshes", None)
        return state


class DarcyDataset(FileDataset):
    r"""Lazy reader of a dataset file: sample ``i`` on mesh ``mesh`` as a
    :class:`~geoattn.mesh.MeshData` with ``pos``, ``weight``, ``cells``, ``cell_type``,
    ``x`` (coefficient :math:`a` at the nodes) and ``y`` (solution :math:`u`).

    The mesh (points, cells, weights) is read once, checked against its CRC-32 and against the
    hash of the mesh the samples were generated on (which the CRC-32 of an edited mesh, recomputed,
    does not replace), and validated
    (finite nodes, cell indices in range, no cell twice, finite weights ``>= 0`` with a positive
    total); fields are read one sample at a time and checked against their CRC-32. Every sample
    shares the mesh's ``pos``, ``weight`` and ``cells`` tensors (do not modify them in place), and
    the dataset holds the one :class:`~geoattn.mesh.Mesh` of its mesh in :attr:`meshes` (every
    sample names it: ``mesh_id = 0``), which the trainer hands the operator for every sample, with
    the structure operators derive from it kept from one call to the next. The HDF5
    handle is opened per process, so the dataset works with the trainer's worker processes
    (:class:`~geoattn.train.loader.MeshLoader`).

    Args:
        path (str or Path): the dataset file.
        mesh (str, optional): the mesh to read; may be omitted when the file holds one mesh.
        transform (callable, optional): PyG transform applied on access. (default: ``None``)
        dtype (torch.dtype, optional): floating dtype (default: torch's default dtype).
        verify (bool, optional): check each sample's checksum on read. (default: ``True``)

    Shapes:
        - **sample:** ``pos [N, d]``, ``weight [N]``, ``x [N, 1]``, ``y [N, 1]``, ``cells [M, V]``.
    """

    def __init__(self, path: str | Path, mesh: str | None = None, transform=None,
                 dtype: torch.dtype | None = None, verify: bool = True):
        self.path = Path(path)
        self.dtype = dtype or torch.get_default_dtype()
        self.verify = verify
        self._fh, self._pid = None, None
        with open_dataset_file(self.path) as fh:
            names = sorted(fh["meshes"])
            if mesh is None:
                if len(names) != 1:
                    raise ValueError(f"{self.path} holds meshes {names}; choose one with mesh=NAME")
                mesh = names[0]
            if mesh not in names:
                raise ValueError(f"{self.path} has no mesh {mesh!r}; it holds {names}")
            done = _read(self.path, "the completion flags", lambda: fh["done"][:])
            if not np.all(done):
                raise DatasetFileError(
                    f"{self.path} is incomplete: {int(done.sum())} of {len(done)} samples were "
                    "generated; run the same generate command again to resume")
            self.mesh_names, self.mesh = names, mesh
            self.recipe = str(fh.attrs.get("recipe", ""))
            self.attrs = {k: (v.item() if hasattr(v, "item") else v) for k, v in fh.attrs.items()}
            self._n = len(done)
            self._base = _read(self.path, f"mesh {mesh!r}", lambda: self._load_mesh(fh["meshes"][mesh]))
        self.meshes = MeshStore([Mesh(self._base.pos, self._base.weight, self._base.cells)])
        super().__init__(None, transform, log=False)

    @property
    def mesh_object(self) -> Mesh:
        """The :class:`~geoattn.mesh.Mesh` of the dataset's mesh (``meshes[0]``)."""
        return self.meshes[0]

    @property
    def mesh_ids(self) -> list[int]:
        """The mesh number of every sample: ``0``."""
        return [0] * len(self)

    def _load_mesh(self, group: h5py.Group) -> MeshData:
        points, cells, weight = group["points"][:], group["cells"][:], group["weight"][:]
        if crc32(points, cells, weight) != int(group.attrs["checksum"]):
            raise DatasetFileError(f"{self.path}: mesh {self.mesh!r} fails its checksum (corrupted)")
        for key in ("x", "y", "checksum"):
            if group[key].shape[0] != self._n:
                raise DatasetFileError(f"{self.path}: mesh {self.mesh!r} field {key!r} has "
                                       f"{group[key].shape[0]} rows, expected {self._n}")
        with located(f"{self.path}: mesh {self.mesh!r}"):  # refuse a dtype that loses them
            data = MeshData(pos=cast_positions(np.asarray(points, dtype=np.float64), self.dtype),
                            weight=cast_weights(weight, self.dtype))
        data.cells = torch.as_tensor(cells, dtype=torch.long)
        data.cell_type = str(group.attrs["cell_type"])
        with located(f"{self.path}: mesh {self.mesh!r}"):
            validate_sample(data, check_mesh=False)
        stored = group.attrs.get("mesh_hash")
        if stored is not None and mesh_hash(points, cells) != str(stored):
            raise DatasetFileError(
                f"{self.path}: mesh {self.mesh!r} is not the mesh its samples were generated on (its "
                "nodes or cells changed after generation: they fail the stored mesh hash); regenerate "
                "the dataset, or restore the mesh")
        return data

    def _group(self) -> h5py.Group:
        return self._file()["meshes"][self.mesh]

    def len(self) -> int:
        return self._n

    def get(self, idx: int) -> MeshData:
        group = self._group()

        def read():
            return group["x"][idx], group["y"][idx], int(group["checksum"][idx])

        x, y, check = _read(self.path, f"sample {idx} of mesh {self.mesh!r}", read)
        if self.verify and crc32(x, y) != check:
            raise DatasetFileError(f"{self.path}: sample {idx} of mesh {self.mesh!r} fails its "
                                   "checksum (corrupted file)")
        data = copy.copy(self._base)  # the mesh's tensors shared (one Mesh for every sample)
        data.x = torch.as_tensor(x, dtype=self.dtype).reshape(-1, 1)  # [N, 1]
        data.y = torch.as_tensor(y, dtype=self.dtype).reshape(-1, 1)  # [N, 1]
        data.mesh_id = 0
        return data

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.path.name}, mesh={self.mesh!r}, n={self._n})"


__all__ = ["DarcyDataset", "FORMAT", "FORMAT_VERSION", "crc32", "mesh_hash", "open_dataset_file"]
