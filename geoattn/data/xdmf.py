"""XDMF companions of dataset files, so ParaView (and VisIt) open the data in place.

For each mesh of a dataset file ``NAME.h5`` the companion ``NAME.<mesh>.xdmf`` describes a
temporal collection whose step ``i`` is sample ``i``: the mesh topology and geometry point at
``/meshes/<mesh>/cells`` and ``points``, and the node fields ``a``, ``u`` at row ``i`` of
``x``, ``y`` through XDMF hyperslabs (no data is copied). Open it in ParaView with the
"XDMF Reader" and step through the samples with the time controls.
"""

from __future__ import annotations

from pathlib import Path
from xml.sax.saxutils import escape

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


def write_xdmf(path: str | Path) -> list[Path]:
    """Write one XDMF companion per mesh next to the dataset file; returns their paths."""
    path = Path(path)
    written = []
    with open_dataset_file(path) as fh:
        n = int(fh.attrs["n"])
        for name, g in fh["meshes"].items():
            num_nodes, dim = g["points"].shape
            num_cells, verts = g["cells"].shape
            base = f"{path.name}:/meshes/{name}"
            topo = (f'<Topology TopologyType="{_TOPOLOGY[str(g.attrs["cell_type"])]}" '
                    f'NumberOfElements="{num_cells}">{_item((num_cells, verts), base + "/cells", "Int")}'
                    f"</Topology>")
            geom = (f'<Geometry GeometryType="{_GEOMETRY[dim]}">'
                    f"{_item((num_nodes, dim), base + '/points')}</Geometry>")
            weight = (f'<Attribute Name="weight" AttributeType="Scalar" Center="Node">'
                      f"{_item((num_nodes,), base + '/weight')}</Attribute>")
            steps = []
            for i in range(n):
                fields = "".join(
                    f'<Attribute Name="{label}" AttributeType="Scalar" Center="Node">'
                    f"{_row(n, num_nodes, i, base + '/' + key)}</Attribute>"
                    for label, key in (("a", "x"), ("u", "y")))
                steps.append(f'<Grid Name="sample {i}" GridType="Uniform"><Time Value="{i}"/>'
                             f"{topo}{geom}{weight}{fields}</Grid>\n")
            text = ('<?xml version="1.0"?>\n<Xdmf Version="3.0">\n<Domain>\n'
                    f'<Grid Name="{escape(name)}" GridType="Collection" CollectionType="Temporal">\n'
                    + "".join(steps) + "</Grid>\n</Domain>\n</Xdmf>\n")
            out = path.with_name(f"{path.stem}.{name}.xdmf")
            out.write_text(text)
            written.append(out)
    return written


__all__ = ["write_xdmf"]
