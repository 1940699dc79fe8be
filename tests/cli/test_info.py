"""``geoattn info`` on files as solvers write them: per-element vertices, several cell blocks,
surfaces in 3-D."""

import meshio
import numpy as np
import pytest

from geoattn.cli.main import main

families = pytest.importorskip("geoattn.mesh.families", exc_type=ImportError)


def _per_element_sphere(path):
    m = families.icosphere(2)
    points = m.points[m.cells[0].data].reshape(-1, 3)  # every triangle's vertices written apart
    meshio.write(path, meshio.Mesh(points, [("triangle", np.arange(len(points)).reshape(-1, 3)),
                                            ("line", np.array([[0, 1]]))]))
    return len(m.points), len(points)


def test_info_merges_duplicates_of_a_surface(tmp_path, capsys):
    path = tmp_path / "sphere.vtu"
    nodes, written = _per_element_sphere(path)
    assert main(["info", str(path)]) == 2
    err = capsys.readouterr().err
    assert "--merge-duplicates" in err and len(err.strip().splitlines()) == 1
    assert main(["info", str(path), "--merge-duplicates", "--cell-block", "triangle"]) == 0
    out = capsys.readouterr().out
    assert f"nodes       {nodes}" in out and f"merged      {written - nodes}" in out
    assert "(a surface)" in out
    area = float(out.split("area")[1].split()[0])
    assert area == pytest.approx(4 * np.pi, rel=0.05)  # the level-2 icosphere's area (O(h^2) below)
    assert main(["info", str(path), "--merge-duplicates", "1e-9", "--cell-block", "0"]) == 0
