"""Every benchmark writes its results page with ``--docs PATH``, in the layout of
``benchmarks/results_page.py`` (the one test_results_page.py checks on docs/results/)."""

import pytest
import torch

#: the scripts wired to ``--docs PATH``, and the subcommand their parser needs first
SCRIPTS = {"galerkin_experiments": [], "lorenz_cde": [], "kolmogorov": [], "nao": ["radial"], "torus": [],
           "own_files": [], "scale": [], "spectral": [], "attention": [], "neighbors": [], "patch_attention": [],
           "training_step": [], "coordinate_features": [], "darcy_floor": [], "darcy_generation": [],
           "imports": [], "darcy_calvello": [], "vit_transfer": [], "contract": [], "darcy_race": [], "refinement_3d": [], "geometry_input": [],
           "widened_race": []}


@pytest.fixture(autouse=True)
def keep_threads():
    """The scripts set torch's thread count: leave the session's as it was."""
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


def check_layout(path, command_end: str) -> list[str]:
    """The page at ``path`` has the fixed layout (title, command, machine, table); its lines."""
    lines = path.read_text().splitlines()
    assert lines[0].startswith("# ") and lines[1] == "", lines[:2]
    assert lines[2].startswith("Written by: `python benchmarks/") and lines[2].endswith(f"{command_end}`"), lines[2]
    assert lines[3] == "" and lines[4].startswith("Machine: ") and lines[5] == "", lines[3:6]
    assert lines[6], lines
    assert any(line.startswith("|---") for line in lines[6:]), "no table"
    return lines


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_every_script_takes_docs(load_script, name, capsys):
    with pytest.raises(SystemExit) as exit_:
        load_script(name).main([*SCRIPTS[name], "--help"])
    assert exit_.value.code == 0
    assert "--docs PATH" in capsys.readouterr().out


# tiny runs of the cheap scripts: each writes its page
RUNS = {
    "torus": ["--grids", "8", "16", "--cloud", "100", "--modes", "2"],
    "spectral": ["--nodes", "200", "400", "--channels", "2", "--modes", "2", "--repeat", "1", "--threads", "1"],
    "neighbors": ["--nodes", "300", "--repeat", "1", "--threads", "1", "--backends", "scipy", "--no-partitions"],
    "patch_attention": ["--nodes", "300", "--parts", "4", "--repeat", "1", "--channels", "8", "--num-heads", "2"],
    "attention": ["--device", "cpu", "--nodes", "128", "--memory-nodes", "200", "400", "--galerkin-nodes", "200",
                  "--repeat", "1", "--channels", "8", "--num-heads", "2"],
    "refinement_3d": ["--n", "3", "--samples", "2"],
}


#: runs that start fresh processes (seconds each): with --slow only
SLOW_RUNS = {"refinement_3d"}


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n in SLOW_RUNS else n for n in sorted(RUNS)])
def test_tiny_run_writes_its_page(load_script, name, tmp_path):
    page = tmp_path / "docs" / f"{name}.md"
    load_script(name).main([*RUNS[name], "--docs", str(page)])
    lines = check_layout(page, f"--docs {page}")
    assert lines[2] == f"Written by: `python benchmarks/{name}.py {' '.join(RUNS[name])} --docs {page}`"
    assert sorted(p.name for p in page.parent.iterdir()) == [page.name]  # nothing else left beside it


def test_spectral_model_step_writes_its_page(load_script, tmp_path):
    page = tmp_path / "spectral.md"
    load_script("spectral").main(["--model-step", "--mesh-n", "4", "--graphs", "2", "--modes", "1", "--repeat", "2",
                                  "--threads", "1", "--docs", str(page)])
    assert "| forward_backward_ms |" in "\n".join(check_layout(page, str(page)))


@pytest.mark.slow
def test_imports_writes_its_page(load_script, tmp_path):
    page = tmp_path / "imports.md"
    load_script("imports").main(["--repeat", "1", "--docs", str(page)])
    assert "| `geoattn.models` |" in "\n".join(check_layout(page, str(page)))


@pytest.mark.slow
def test_training_step_writes_its_page(load_script, tmp_path):
    page = tmp_path / "training_step.md"
    load_script("training_step").main(["--scale", "tiny", "--threads", "1", "--parts", "pipeline",
                                       "--out", str(tmp_path / "out"), "--docs", str(page)])
    assert "## Pipeline" in "\n".join(check_layout(page, str(page)))
