"""Typed errors raised on malformed meshes, samples and inputs.

Every error names the problem and, where there is one, the first offending index, so that a
bad input is rejected at the boundary instead of surfacing as a crash deep inside torch or as a
silent NaN. Every error derives from :class:`GeoattnError` (catch that to catch them all) and
from :class:`ValueError` (or :class:`OSError` for files that cannot be written); all mesh errors
derive from :class:`MeshError`.
"""

from __future__ import annotations


class GeoattnError(Exception):
    """Base class of every error geoattn raises on purpose, with a message naming the problem."""


class MeshError(GeoattnError, ValueError):
    """Base class of every error about a mesh, a point cloud or a sample living on one."""


class EmptyMeshError(MeshError):
    """The mesh or point cloud has no nodes (or no cells where cells are required)."""


class NonFiniteError(MeshError):
    """A coordinate, field value or weight is NaN or infinite."""


class DuplicateNodeError(MeshError):
    """Two nodes share the same coordinates (within a relative tolerance)."""


class DegenerateCellError(MeshError):
    """A cell has zero (or numerically zero) volume."""


class InvertedCellError(MeshError):
    """A cell has negative orientation (negative signed volume or Jacobian)."""


class CellIndexError(MeshError):
    """A cell refers to a node index outside ``[0, num_nodes)``."""


class UnusedNodeError(MeshError):
    """A node belongs to no cell (raised when ``unused="error"``)."""


class DimensionError(MeshError):
    """Mixed or unsupported spatial dimensions (e.g. cells of two dimensions, 3-D data to a 2-D model)."""


class FieldLengthError(MeshError):
    """A point field has a different number of rows than the mesh has nodes (or a cell field than cells)."""


class WeightError(MeshError):
    """Quadrature weights are negative, non-finite, or of the wrong length."""


class UnsupportedCellError(MeshError):
    """The cell type is not one geoattn supports."""


class ChannelError(MeshError):
    """Input values have a different number of channels than the model was built for."""


class MeshMismatchError(MeshError):
    """A model tied to one mesh (e.g. a Discrete-NAO mixer matrix) received a different mesh."""


class CheckpointError(GeoattnError, ValueError):
    """A checkpoint file is missing, truncated, corrupted or not a geoattn checkpoint."""


class NonFiniteLossError(GeoattnError, ValueError):
    """The training loss became NaN or infinite; the last good checkpoint is kept."""


class DatasetFileError(GeoattnError, ValueError):
    """A dataset file is missing parts, truncated, corrupted, incomplete, or not a geoattn dataset."""


class ConfigError(GeoattnError, ValueError):
    """A setting (command-line flag, configuration file entry, constructor argument) is out of
    range or of the wrong type."""


class NonFiniteOutputError(GeoattnError, ValueError):
    """A model produced NaN or infinite values; nothing was written."""


class OutputError(GeoattnError, OSError):
    """An output file or folder cannot be written (missing parent, no permission, a folder in
    the way); nothing was written."""


class UnusedNodeWarning(UserWarning):
    """Some nodes belong to no cell; they get zero lumped-mass weight (``unused="warn"``)."""


class DTypeError(GeoattnError, ValueError):
    """Input tensors have a floating dtype other than the model's (e.g. float16 values to a
    float32 model); cast them, or the model, first."""


class MeshFileError(MeshError):
    """A mesh file cannot be read: empty, truncated, corrupted, a folder, or of a format meshio
    does not know."""


class DuplicateCellError(MeshError):
    """A cell is listed twice (the same vertex set, in any order); its mass would count twice."""


class ZeroNormError(GeoattnError, ValueError):
    """The target of a relative error has zero norm, so the ratio is undefined."""


class SymmetryError(MeshError):
    """A map given as a symmetry of the domain moves some node off the domain (or is not an isometry)."""


class BatchOrderError(MeshError):
    """The ``batch`` vector is not sorted: a graph's nodes are not contiguous (as
    :class:`torch_geometric.data.Batch` makes them)."""


class OverlappingCellsError(MeshError):
    """Cells overlap: a facet is shared by more than two cells, or two cells lie on the same side
    of a facet they share, so the cells cover part of the domain twice."""


class CoordinateRangeError(MeshError):
    """Coordinates are out of the range a floating dtype resolves: too large (overflow, or
    distances lost far from the origin) or too small for the weights computed from them."""


class LockError(GeoattnError, OSError):
    """A run folder or dataset file is being written by another process (whose pid the message
    names); nothing was written."""


class TooLargeError(GeoattnError, MemoryError):
    """A computation (a refinement, a dense structure) would need more memory than there is; the
    message says how large it would be."""


class DeviceError(GeoattnError, ValueError):
    """Tensors that must be used together are on different devices (or on the ``meta`` device,
    which holds no values); move them to one device first."""


class InputFilesError(MeshError):
    """Several input files cannot be read or used (unreadable, a missing field, an invalid mesh):
    the message lists every one with its reason, and :attr:`errors` holds their errors."""

    def __init__(self, errors: list[BaseException], total: int, shown: int = 10, note: str = ""):
        self.errors = list(errors)
        reasons = [" ".join(str(err).split()) or type(err).__name__ for err in self.errors[:shown]]
        more = len(self.errors) - len(reasons)
        super().__init__(f"{len(self.errors)} of {total} input files cannot be used{note}; fix or remove each: "
                         + " ".join(f"({i}) {r}" for i, r in enumerate(reasons, 1))
                         + (f" (and {more} more)" if more > 0 else ""))


class TooFewNodesError(EmptyMeshError):
    """A point cloud without cells or a box has too few nodes to tell the domain its weights
    measure (two nodes would be given the measure of their own bounding box)."""


class FrameError(MeshError):
    """Samples of one model were read in different coordinate frames (``origin`` / ``scale`` of
    :func:`~geoattn.mesh.from_meshio`), so the model would see one domain at two places."""


__all__ = [
    "GeoattnError",
    "MeshError",
    "EmptyMeshError",
    "NonFiniteError",
    "DuplicateNodeError",
    "DegenerateCellError",
    "InvertedCellError",
    "CellIndexError",
    "UnusedNodeError",
    "DimensionError",
    "FieldLengthError",
    "WeightError",
    "UnsupportedCellError",
    "ChannelError",
    "MeshMismatchError",
    "CheckpointError",
    "NonFiniteLossError",
    "UnusedNodeWarning",
    "DatasetFileError",
    "ConfigError",
    "NonFiniteOutputError",
    "OutputError",
    "DTypeError",
    "MeshFileError",
    "DuplicateCellError",
    "ZeroNormError",
    "SymmetryError",
    "BatchOrderError",
    "OverlappingCellsError",
    "CoordinateRangeError",
    "LockError",
    "TooLargeError",
    "FrameError",
    "InputFilesError",
    "TooFewNodesError",
    "DeviceError",
]
