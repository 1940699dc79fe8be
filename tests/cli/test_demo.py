import meshio
import pytest

from geoattn.cli.demo import SAMPLE_FIELDS
from geoattn.cli.main import main


@pytest.mark.slow
def test_demo_quick_runs_and_writes_report(tmp_path, capsys):
    page = tmp_path / "demo.md"
    assert main(["demo", "--quick", "--out", str(tmp_path), "--no-progress", "--docs", str(page)]) == 0
    lines = page.read_text().splitlines()  # the results pages' layout, the command that wrote it
    assert lines[2] == f"Written by: `geoattn demo --quick --no-progress --docs {page}`"
    assert lines[4].startswith("Machine: ") and "| train (irregular) | 289 | " in page.read_text()
    out = capsys.readouterr().out
    for mesh in ("train (irregular)", "refined x16", "graded", "other irregular", "coarser"):
        assert mesh in out
    assert "weighted rel L2" in out and "resolved rel L2" in out and "unweighted rel L2" in out
    assert "worst ratio on other meshes" in out and ", resolved " in out
    rows = (tmp_path / "crossmesh.csv").read_text().splitlines()
    assert len(rows) == 1 + 3 * 7
    assert (tmp_path / "errors.png").exists() and list(tmp_path.glob("sample_*.vtu"))
    for path in tmp_path.glob("sample_*.vtu"):  # descriptive names; no "x"/"y" ParaView takes for coordinates
        fields = meshio.read(path).point_data
        assert set(fields) == set(SAMPLE_FIELDS), path
        assert abs(fields["error"] - (fields["prediction"] - fields["solution"])).max() < 1e-6
    assert (tmp_path / "weighted" / "best.pt").exists() and (tmp_path / "unweighted" / "metrics.csv").exists()
