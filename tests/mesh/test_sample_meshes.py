"""Every file in meshes/ loads, validates, and its weights sum to the domain's measure."""

import math

import pytest
import torch

from geoattn.mesh import read_mesh
from geoattn.mesh.families import DISK_HOLES, DISK_RADIUS

MEASURES = {"square": 1.0, "l_shape": 3.0, "cube": 1.0, "interval": 1.0,
            "disk": math.pi * (DISK_RADIUS**2 - sum(r * r for *_, r in DISK_HOLES))}


def measure_of(name):
    return next(v for k, v in MEASURES.items() if name.startswith(k))


def test_mesh_files_are_small_and_complete(meshes_dir):
    files = sorted(p.name for p in meshes_dir.iterdir() if p.suffix in (".vtu", ".msh"))
    for family in ("structured", "irregular", "graded"):
        assert f"square_{family}.vtu" in files and f"square_{family}_refined.vtu" in files
    assert {"l_shape.vtu", "disk_two_holes.msh", "cube_tetra.vtu"} <= set(files)
    assert all((meshes_dir / f).stat().st_size < 1_000_000 for f in files)


@pytest.mark.parametrize("name", ["square_structured.vtu", "square_irregular.vtu", "square_graded.vtu",
                                  "square_structured_refined.vtu", "square_irregular_refined.vtu",
                                  "square_graded_refined.vtu", "square_quad.vtu", "l_shape.vtu",
                                  "cube_tetra.vtu", "interval_irregular.vtu", "disk_two_holes.msh"])
def test_mesh_file_weights_sum_to_measure(meshes_dir, name):
    data = read_mesh(meshes_dir / name, unused="error", dtype=torch.float64)
    total = float(data.weight.sum())
    if name.startswith("disk"):
        # Straight edges cut the circles: the polygonal domain differs by O(h^2).
        assert total == pytest.approx(measure_of(name), rel=5e-3)
    else:
        assert total == pytest.approx(measure_of(name), rel=1e-12)


def test_refined_squares_have_four_times_the_nodes(meshes_dir):
    for family in ("structured", "irregular", "graded"):
        coarse = read_mesh(meshes_dir / f"square_{family}.vtu")
        fine = read_mesh(meshes_dir / f"square_{family}_refined.vtu")
        assert 3.5 < fine.num_nodes / coarse.num_nodes < 4.5
