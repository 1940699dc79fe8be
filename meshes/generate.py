"""Regenerate the sample meshes in this folder: ``python meshes/generate.py``.

Deterministic (fixed seeds); the disk with two holes needs gmsh (``pip install 'geoattn[meshgen]'``)
and is skipped with a message when it is missing.
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

import meshio

from geoattn.mesh import families
from geoattn.mesh.io import save_meshio

log = logging.getLogger("meshes")

#: name -> (builder, file name); the square families also get a ``*_refined`` version (×4 nodes).
SQUARES = {
    "square_structured": lambda: families.unit_square(16, "structured"),
    "square_irregular": lambda: families.unit_square(16, "irregular", seed=0),
    "square_graded": lambda: families.unit_square(16, "graded"),
}
OTHERS = {
    "square_quad.vtu": lambda: families.unit_square(16, "structured", cell="quad"),
    "l_shape.vtu": lambda: families.l_shape(8),
    "cube_tetra.vtu": lambda: families.unit_cube(6),
    "interval_irregular.vtu": lambda: families.interval(32, "irregular"),
    "disk_two_holes.msh": lambda: families.disk_with_holes(0.08),
}


def generate(out: Path) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    written = []

    def write(name: str, mesh: meshio.Mesh) -> None:
        path = out / name
        save_meshio(path, mesh, binary=False)  # text: readable in diffs
        written.append(path)
        log.info("wrote %s (%d nodes)", path, len(mesh.points))

    for name, build in SQUARES.items():
        mesh = build()
        write(f"{name}.vtu", mesh)
        write(f"{name}_refined.vtu", families.refine(mesh))
    for name, build in OTHERS.items():
        try:
            write(name, build())
        except ImportError as err:
            log.warning("skipped %s: %s", name, err)
    return written


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, default=Path(__file__).parent)
    generate(parser.parse_args().out)
