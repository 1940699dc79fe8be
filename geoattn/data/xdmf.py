"""XDMF companions of dataset files, so ParaView (and VisIt) open the data in place.

For each mesh of a dataset file ``NAME.h5`` the companion ``NAME.<mesh>.xdmf`` describes a
temporal collection whose step ``i`` is sample ``i``: the mesh topology and geometry point at
``/meshes/<mesh>/cells`` and ``points``, and the node fields ``a``, ``u`` at row ``i`` of
``x``, ``y`` through XDMF hyperslabs (no data is copied). Open it in ParaView with the
"XDMF Reader" and step through the samples with the time controls. meshio reads only the mesh
of a companion (``meshio.xdmf.TimeSeriesReader(path).read_points_cells()``): it implements no
hyperslabs, so its ``read_data`` fails on the fields; read the samples with
:class:`~geoattn.data.dataset.DarcyDataset` instead.

A version-2 file ``NAME.h5`` (from ``geoattn import``, :mod:`~geoattn.data.meshdataset`) gets one
companion ``NAME.xdmf`` (:func:`write_mesh_xdmf`): a temporal collection whose step ``i`` is
sample ``i`` on its own mesh (``/meshes/<number>``), with one node field per input and target
channel under its name (a hyperslab of ``x`` or ``y``), the weights, and the global parameters
as ``<Information>``. The mesh may change from step to step; the split of each sample is in
the dataset file, not the companion.
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


def _channel(k: int, num_nodes: int, channels: int, row: int, c: int, ref: str) -> str:
    """Channel ``c`` of row ``row`` of a field dataset ``[k, N, C]``, as a hyperslab ``[1, N, 1]``."""
    return (f'<DataItem ItemType="HyperSlab" Dimensions="1 {num_nodes} 1" Type="HyperSlab">'
            f'<DataItem Dimensions="3 3" NumberType="Int" Format="XML">{row} 0 {c} 1 1 1 1 {num_nodes} 1'
            f"</DataItem>{_item((k, num_nodes, channels), ref)}</DataItem>")


def _mesh_step(file_name: str, i: int, key: str, g, row: int, names: dict[str, list[str]],
               params: dict[str, float]) -> str:
    """The ``<Grid>`` of sample ``i``, row ``row`` of mesh group ``g`` (``/meshes/<key>``)."""
    (num_nodes, dim), (num_cells, verts) = g["points"].shape, g["cells"].shape
    base = f"{file_name}:/meshes/{key}"
    cell_type = str(g.attrs["cell_type"])
    if cell_type:
        topo = (f'<Topology TopologyType="{_TOPOLOGY[cell_type]}" NumberOfElements="{num_cells}">'
                f'{_item((num_cells, verts), base + "/cells", "Int")}</Topology>')
    else:  # a point cloud
        topo = f'<Topology TopologyType="Polyvertex" NumberOfElements="{num_nodes}" NodesPerElement="1"/>'
    geom = f'<Geometry GeometryType="{_GEOMETRY[dim]}">{_item((num_nodes, dim), base + "/points")}</Geometry>'
    attrs = [f'<Attribute Name="weight" AttributeType="Scalar" Center="Node">'
             f'{_item((num_nodes,), base + "/weight")}</Attribute>']
    for key_, labels in names.items():
        k, _, channels = g[key_].shape
        attrs += [f'<Attribute Name="{escape(label, {chr(34): "&quot;"})}" AttributeType="Scalar" '
                  f'Center="Node">{_channel(k, num_nodes, channels, row, c, base + "/" + key_)}</Attribute>'
                  for c, label in enumerate(labels)]
    info = "".join(f'<Information Name="{escape(k, {chr(34): "&quot;"})}" Value="{v!r}"/>'
                   for k, v in params.items())
    return (f'<Grid Name="sample {i}" GridType="Uniform"><Time Value="{i}"/>{info}{topo}{geom}'
            f'{"".join(attrs)}</Grid>\n')


def write_mesh_xdmf(path: str | Path) -> Path:
    """Write the XDMF companion ``<stem>.xdmf`` of a version-2 dataset file (see the module's
    docstring), one step per sample, atomically; returns its path."""
    import json

    path = Path(path)
    out = path.with_suffix(".xdmf")
    with open_dataset_file(path, versions=(2,)) as fh:
        names = {"x": json.loads(str(fh.attrs["x_names"])), "y": json.loads(str(fh.attrs["y_names"]))}
        param_names = json.loads(str(fh.attrs["param_names"]))
        meshes, rows = fh["samples/mesh"][:], fh["samples/row"][:]
        params = fh["samples/params"][:]
        with atomic_path(out) as tmp, open(tmp, "w") as text:
            text.write('<?xml version="1.0"?>\n<Xdmf Version="3.0">\n<Domain>\n'
                       f'<Grid Name="{escape(path.stem)}" GridType="Collection" CollectionType="Temporal">\n')
            for i, (number, row) in enumerate(zip(meshes, rows)):
                key = f"{int(number):06d}"
                text.write(_mesh_step(path.name, i, key, fh["meshes"][key], int(row), names,
                                      dict(zip(param_names, params[i].tolist()))))
            text.write("</Grid>\n</Domain>\n</Xdmf>\n")
    return out


__all__ = ["step_bytes", "write_mesh_xdmf", "write_xdmf"]
