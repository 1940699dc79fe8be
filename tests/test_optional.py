import logging
import subprocess
import sys
import textwrap

import pytest

from geoattn import optional
from geoattn.optional import MissingDependencyError, progress, require

HEAVY = ("skfem", "meshio", "h5py", "matplotlib", "tqdm", "finufft")


def test_require_returns_the_module():
    import math

    assert require("math", "data", "a test") is math


def test_require_names_package_feature_and_extra():
    with pytest.raises(ImportError) as info:
        require("geoattn_no_such_module.sub", "plot", "the test feature")
    message = str(info.value)
    assert isinstance(info.value, MissingDependencyError)
    assert "'geoattn_no_such_module'" in message and "the test feature" in message
    assert "pip install 'geoattn[plot]'" in message


def test_require_names_the_pip_package_of_scikit_fem(monkeypatch):
    monkeypatch.setitem(sys.modules, "skfem", None)  # as if scikit-fem were not installed
    with pytest.raises(ImportError, match=r"'scikit-fem'.*pip install 'geoattn\[data\]'"):
        require("skfem", "data", "the Darcy solver")


def test_require_does_not_hide_a_broken_installed_package(tmp_path, monkeypatch):
    (tmp_path / "geoattn_broken_pkg.py").write_text("import geoattn_missing_inner\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ModuleNotFoundError) as info:
        require("geoattn_broken_pkg", "data", "a test")
    assert not isinstance(info.value, MissingDependencyError)
    assert info.value.name == "geoattn_missing_inner"


@pytest.fixture
def terminal(monkeypatch):
    """Standard error is a terminal (under pytest it is captured, so it is not)."""
    monkeypatch.setattr(optional, "_is_terminal", lambda stream: True)


@pytest.fixture
def no_tqdm(monkeypatch, terminal):
    monkeypatch.setitem(sys.modules, "tqdm", None)
    monkeypatch.setitem(sys.modules, "tqdm.auto", None)
    optional._say_once.cache_clear()
    yield
    optional._say_once.cache_clear()


def test_progress_without_tqdm_iterates_fully_and_says_so_once(no_tqdm, caplog):
    with caplog.at_level(logging.INFO, logger="geoattn.optional"):
        bar = progress(range(5), desc="x", unit="step")
        assert list(bar) == [0, 1, 2, 3, 4]
        assert list(progress(iter("ab"))) == ["a", "b"]
    hints = [r for r in caplog.records if "geoattn[progress]" in r.getMessage()]
    assert len(hints) == 1 and hints[0].levelno == logging.INFO


def test_progress_stand_in_has_the_bar_api(no_tqdm):
    with progress(total=3, leave=False) as bar:
        for _ in range(3):
            bar.update()
            bar.set_postfix(loss="1.0")
    bar.close()
    assert list(bar) == []


def test_disabled_progress_is_silent_and_needs_no_tqdm(caplog, capsys):
    optional._say_once.cache_clear()
    with caplog.at_level(logging.INFO, logger="geoattn.optional"):
        bar = progress(range(3), enabled=False, desc="x")
        assert list(bar) == [0, 1, 2]
    assert not caplog.records and capsys.readouterr() == ("", "")
    assert not type(bar).__module__.startswith("tqdm")


def test_progress_is_tqdm_when_installed(terminal):
    tqdm = pytest.importorskip("tqdm.auto").tqdm
    bar = progress(range(4), disable=True)
    assert isinstance(bar, tqdm) and list(bar) == [0, 1, 2, 3]


def test_no_bar_when_standard_error_is_not_a_terminal(caplog, capsys):
    """Redirected to a log or a pipe, a bar would write its redraws there: none is drawn."""
    optional._say_once.cache_clear()
    with caplog.at_level(logging.INFO, logger="geoattn.optional"):
        bar = progress(range(3), desc="x")
        assert list(bar) == [0, 1, 2]
        bar.set_postfix(loss="1")
        bar.close()
    assert not type(bar).__module__.startswith("tqdm")
    assert not caplog.records and capsys.readouterr() == ("", "")
    assert optional._is_terminal(object()) is False


def test_redirected_progress_writes_a_plain_line_at_most_once_a_minute(monkeypatch, capsys):
    """Not on a terminal, a long loop writes one newline-terminated line per interval (count,
    share, elapsed and remaining time) and nothing before the first interval has passed."""
    clock = [1000.0]
    monkeypatch.setattr(optional.time, "monotonic", lambda: clock[0])
    bar = progress(range(10), desc="floor", unit="sample")
    seen = []
    for i in bar:
        clock[0] += 25.0  # 25 s per item: lines after items 3, 6 and 9 (75, 150, 225 s)
        seen.append(i)
    assert seen == list(range(10))
    lines = capsys.readouterr().err.splitlines()
    assert lines == ["floor: 3/10 sample (30 %), 0:01:15 elapsed, about 0:02:55 left",
                     "floor: 6/10 sample (60 %), 0:02:30 elapsed, about 0:01:40 left",
                     "floor: 9/10 sample (90 %), 0:03:45 elapsed, about 0:00:25 left"]
    with progress(desc="steps") as driven:  # no total: the count and the elapsed time
        clock[0] += 61.0
        driven.update(4)
    assert capsys.readouterr().err == "steps: 4 it, 0:01:01 elapsed\n"
    with progress(total=8, initial=2, desc="resumed") as resumed:  # counts on from ``initial``
        clock[0] += 60.0
        resumed.update(2)
    assert capsys.readouterr().err == "resumed: 4/8 it (50 %), 0:01:00 elapsed, about 0:02:00 left\n"


# Run in a fresh interpreter in which the blocked packages cannot be imported (torch and
# torch_geometric load first: torch.hub imports tqdm by itself when it is installed).
_BLOCKED_IMPORT = """
import importlib.abc, sys
import torch, torch_geometric

BLOCKED = {blocked!r}
for name in [m for m in sys.modules if m.partition(".")[0] in BLOCKED]:
    del sys.modules[name]

class Blocker(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"No module named {{name!r}} (blocked)", name=name)

sys.meta_path.insert(0, Blocker())
{code}
print(sorted(m for m in sys.modules if m.partition(".")[0] in BLOCKED))
"""


def _run_blocked(blocked, code):
    script = _BLOCKED_IMPORT.format(blocked=tuple(blocked), code=textwrap.dedent(code))
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("modules, blocked", [
    ("geoattn, geoattn.nn, geoattn.models", HEAVY),
    ("geoattn.mesh, geoattn.train, geoattn.eval, geoattn.cli.main", ("skfem", "h5py", "matplotlib", "tqdm")),
])
def test_core_imports_load_no_optional_package(modules, blocked):
    result = _run_blocked(blocked, f"import {modules}")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]", result.stdout


def test_mesh_families_load_on_first_use():
    result = _run_blocked((), """
        import sys
        import geoattn.mesh
        assert "skfem" not in sys.modules
        families = geoattn.mesh.families
        assert "skfem" in sys.modules and families.unit_square(2).points.shape == (9, 2)
        from geoattn.mesh import families as again
        assert again is families
    """)
    assert result.returncode == 0, result.stderr


def test_mesh_families_without_scikit_fem_name_the_extra():
    result = _run_blocked(("skfem",), """
        import geoattn.mesh
        try:
            geoattn.mesh.families
        except ImportError as err:
            print(err)
    """)
    assert result.returncode == 0, result.stderr
    assert "'scikit-fem'" in result.stdout and "pip install 'geoattn[data]'" in result.stdout
