import sys

import pytest

import geoattn
from geoattn.cli.main import main


def test_version(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0 and geoattn.__version__ in capsys.readouterr().out


def test_help_lists_commands(capsys):
    assert main([]) == 0
    out = capsys.readouterr().out
    assert "demo" in out and "info" in out


def test_info_reports_measure(meshes_dir, capsys):
    assert main(["info", str(meshes_dir / "l_shape.vtu")]) == 0
    assert "measure     3" in capsys.readouterr().out


def test_info_bad_file_is_one_line_error(tmp_path, capsys):
    assert main(["info", str(tmp_path / "none.vtu")]) == 2
    assert "no mesh file" in capsys.readouterr().err


def test_missing_extra_is_one_line_error(monkeypatch, tmp_path, capsys):
    monkeypatch.setitem(sys.modules, "skfem", None)  # as if scikit-fem were not installed
    for name in [m for m in sys.modules if m.startswith(("geoattn.data", "geoattn.mesh.families"))]:
        monkeypatch.delitem(sys.modules, name)
    assert main(["generate", "--mesh", "a.vtu", "--n", "1", "--out", str(tmp_path / "d.h5")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "'scikit-fem'" in err and "pip install 'geoattn[data]'" in err
