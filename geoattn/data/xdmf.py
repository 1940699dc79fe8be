"""XDMF companions of dataset files, so ParaView (and VisIt) open the data in place.

For each mesh of a dataset file ``NAME.h5`` the companion ``NAME.<mesh>.xdmf`` describes a
temporal collection whose step ``i`` is sample ``i``: the mesh topology and geometry point at
``/meshes/<mesh>/cells`` and ``points``, and the node fields ``a``, ``u`` at row ``i`` of
``x``, ``y`` through XDMF hyperslabs (no data is copied). Open it in ParaView with the
"XDMF Reader" and step through the samples with the time controls. meshio reads only the mesh
of a companion (``meshio.xdmf.TimeSeriesReader(path).read_points_cells()``): it implements no
hyperslabs, so its ``read_data`` fails on the fields; read the samples with
:class:`~geoattn.data.dataset.DarcyDataset` instead.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from xml.sax.saxutils import escape

from ..atomic import atomic_path
from .dataset import open_dataset_file

_TOPOLOGY = {"triangle": "Triangle", "tetra": "Tetrahedron", "quad": "Quadrilateral",
             "hexahedron": "Hexahedron", "line": "Polyline"}
_GEOMETRY = {1: "X", 2: "XY", 3: "XYZ"}


def _item(dims, ref: str, number: str = "Float") -> str:
    shape = " ".join(str(d) for d in dims)
    return (f'<DataItem Dimensions="{shape}" NumberType="{number}" Precision="8" '
            f'Format="HDF">{escape(ref)}</DataItem>')


def _row(n: int, num_nodes: int, i: int, ref: str) -> str:
    return (f'<DataItem ItemType="HyperSlab" Dimensions="1 {num_nodes}" Type="HyperSlab">'
            f'<DataItem Dimensions="3 2" NumberType="Int" Format="XML">{i} 0 1 1 1 {num_nodes}</DataItem>'
            f"{_item((n, num_nodes), ref)}</DataItem>")


def _steps(file_name: str, name: str, n: int, points_shape, cells_shape, cell_type: str,
           start: int = 0) -> Iterator[str]:
    """The ``<Grid>`` of each sample ``start .. n - 1`` of mesh ``name``, one line each."""
    (num_nodes, dim), (num_cells, verts) = points_shape, cells_shape
    base = f"{file_name}:/meshes/{name}"
    topo = (f'<Topology TopologyType="{_TOPOLOGY[cell_type]}" '
            f'NumberOfElements="{num_cells}">{_item((num_cells, verts), base + "/cells", "Int")}'
            f"</Topology>")
    geom = (f'<Geometry GeometryType="{_GEOMETRY[dim]}">'
            f"{_item((num_nodes, dim), base + '/points')}</Geometry>")
    weight = (f'<Attribute Name="weight" AttributeType="Scalar" Center="Node">'
              f"{_item((num_nodes,), base + '/weight')}</Attribute>")
    for i in range(start, n):
        fields = "".join(
            f'<Attribute Name="{label}" AttributeType="Scalar" Center="Node">'
            f"{_row(n, num_nodes, i, base + '/' + key)}</Attribute>"
            for label, key in (("a", "x"), ("u", "y")))
        yield (f'<Grid Name="sample {i}" GridType="Uniform"><Time Value="{i}"/>'
               f"{topo}{geom}{weight}{fields}</Grid>\n")


def step_bytes(file_name: str, name: str, n: int, points_shape, cells_shape, cell_type: str) -> int:
    """Bytes that one sample of mesh ``name`` adds to its companion (at most; the last sample's)."""
    return len(next(_steps(file_name, name, n, points_shape, cells_shape, cell_type, start=n - 1)))


def write_xdmf(path: str | Path) -> list[Path]:
    """Write one XDMF companion per mesh next to the dataset file; returns their paths.

    The companions are written step by step, so memory stays flat for any number of samples,
    and atomically (:func:`~geoattn.atomic.atomic_path`): an interrupted or killed write leaves
    the previous companion, if any, and never half of one.
    """
    path = Path(path)
    written = []
    with open_dataset_file(path) as fh:
        n = int(fh.attrs["n"])
        for name, g in fh["meshes"].items():
            out = path.with_name(f"{path.stem}.{name}.xdmf")
            with atomic_path(out) as tmp, open(tmp, "w") as text:
                text.write('<?xml version="1.0"?>\n<Xdmf Version="3.0">\n<Domain>\n'
                           f'<Grid Name="{escape(name)}" GridType="Collection" CollectionType="Temporal">\n')
                text.writelines(_steps(path.name, name, n, g["points"].shape, g["cells"].shape,
                                       str(g.attrs["cell_type"])))
                text.write("</Grid>\n</Domain>\n</Xdmf>\n")
            written.append(out)
    return written


__all__ = ["step_bytes", "write_xdmf"]
