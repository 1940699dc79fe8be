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


def test_an_error_raised_while_a_stop_unwinds_is_the_stop(monkeypatch, capsys):
    # torch's checkpoint writer, cut short by SIGTERM, raises its own error while closing the
    # archive; that error replaces the Stopped: the command still ends as stopped, one line, 143
    import signal

    from geoattn.cli import info
    from geoattn.cli.entry import Stopped

    def run(args):
        try:
            raise Stopped(signal.SIGTERM)
        except KeyboardInterrupt:
            raise RuntimeError("[enforce fail at inline_container.cc] unexpected pos 64 vs 0")  # noqa: B904

    monkeypatch.setattr(info, "run", run)
    assert main(["info", "x.vtu"]) == 143
    err = capsys.readouterr().err
    assert err == "geoattn info: interrupted by SIGTERM\n"

    def fails(args):  # an error with no stop behind it still goes through as before
        raise RuntimeError("a bug")

    monkeypatch.setattr(info, "run", fails)
    with pytest.raises(RuntimeError, match="a bug"):
        main(["info", "x.vtu"])
