"""benchmarks/results_page.py: the fixed page layout, atomic writes, the --docs option."""

import argparse
import os
from pathlib import Path

import pytest

SCRIPT = "results_page"
DOCS = Path(__file__).resolve().parents[2] / "docs" / "results"


def test_layout(script, tmp_path):
    table = script.markdown_table(["model", "error"], [["tno", "0.0331"], ["mesh_fno", 0.04]])
    path = script.write_page(tmp_path / "x.md", "X (`benchmarks/x.py`)",
                             "python benchmarks/x.py --docs docs/results/x.md",
                             table, "2 CPU cores; 2026-01-01", notes="It shows Y.")
    assert path.read_text() == (
        "# X (`benchmarks/x.py`)\n\n"
        "Written by: `python benchmarks/x.py --docs docs/results/x.md`\n\n"
        "Machine: 2 CPU cores; 2026-01-01\n\n"
        "| model | error |\n|---|---|\n| tno | 0.0331 |\n| mesh_fno | 0.04 |\n\n"
        "It shows Y.\n")
    assert script.render_page("X", "c", table, "m") == script.render_page("X", "c", table, "m", "  ")
    assert not script.render_page("X", "c", table, "m").endswith("\n\n")


def test_replaces_atomically_and_leaves_nothing_behind(script, tmp_path, monkeypatch):
    path = tmp_path / "sub" / "p.md"
    script.write_page(path, "T", "c", "| a |\n|---|\n| 1 |", "m")
    first = path.read_text()

    def fail(*args):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", fail)
    with pytest.raises(OSError):
        script.write_page(path, "T", "c", "| a |\n|---|\n| 2 |", "m")
    assert path.read_text() == first
    assert sorted(p.name for p in path.parent.iterdir()) == ["p.md"]


@pytest.mark.parametrize("bad", [dict(title=" "), dict(command="a `b`"), dict(table_markdown="")])
def test_refuses_incomplete_pages(script, bad):
    args = dict(title="T", command="c", table_markdown="| a |\n|---|", machine="m") | bad
    with pytest.raises(ValueError):
        script.render_page(**args)
    with pytest.raises(ValueError):
        script.markdown_table(["a", "b"], [["1"]])


def test_docs_argument(script):
    parser = script.add_docs_argument(argparse.ArgumentParser())
    assert parser.parse_args([]).docs is None
    assert parser.parse_args(["--docs", "docs/results/x.md"]).docs == Path("docs/results/x.md")


def test_the_pages_in_docs_have_the_layout(script):
    pages = sorted(DOCS.glob("*.md"))
    assert pages
    for page in pages:
        lines = page.read_text().splitlines()
        assert lines[0].startswith("# ") and lines[1] == "", page
        assert lines[2].startswith("Written by: `") and lines[2].endswith("`"), page
        assert f"docs/results/{page.name}" in lines[2], page
        assert lines[3] == "" and lines[4].startswith("Machine: ") and lines[5] == "", page
