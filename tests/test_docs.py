"""The documentation builds without warnings (broken docs fail the test suite)."""

import pathlib
import shutil
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_sphinx_builds_without_warnings(tmp_path):
    pytest.importorskip("sphinx", reason="install the 'docs' extra to build the documentation")
    result = subprocess.run(
        [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html",
         str(ROOT / "docs"), str(tmp_path / "html")],
        capture_output=True, text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    shutil.rmtree(tmp_path / "html", ignore_errors=True)
