"""Simulation files as users have them: a plate with a hole, a different mesh in every file, an
input field, two target fields and a global parameter (for the import and dataset tests)."""

import meshio
import numpy as np

from geoattn.mesh.families import unit_square


def plate_with_hole(n: int, seed: int = 0) -> meshio.Mesh:
    """The unit square with a hole of radius 0.25 at its centre, an irregular triangulation."""
    square = unit_square(n, "irregular", seed=seed)
    cells = square.cells_dict["triangle"]
    centroid = square.points[cells].mean(axis=1)
    cells = cells[np.linalg.norm(centroid[:, :2] - 0.5, axis=1) > 0.25]
    used = np.unique(cells)
    renumber = np.full(len(square.points), -1)
    renumber[used] = np.arange(len(used))
    return meshio.Mesh(square.points[used], [("triangle", renumber[cells])])


def simulation(mesh: meshio.Mesh, load: float) -> meshio.Mesh:
    """A mesh with fields kappa (input), T and q (targets) depending on the parameter load."""
    x, y = mesh.points[:, 0], mesh.points[:, 1]
    kappa = 1 + x * y + 0.1 * load
    point_data = {"kappa": kappa, "T": load * np.sin(np.pi * x) * y / kappa, "q": x - y}
    return meshio.Mesh(mesh.points, mesh.cells, point_data=point_data)
