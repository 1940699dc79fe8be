"""``geoattn generate``: from arguments and from a recipe, resumable, clear errors."""

import torch

from geoattn.cli.main import main
from geoattn.data.dataset import DarcyDataset
from geoattn.data.darcy import darcy_samples
from geoattn.data.grf import preset
import meshio


def test_generate_from_arguments(tmp_path, meshes_dir, capsys):
    out = tmp_path / "d.h5"
    mesh = meshes_dir / "square_irregular.vtu"
    argv = ["generate", "darcy", "--mesh", f"train={mesh}", "--n", "3", "--seed", "4",
            "--family", "lognormal", "--modes", "8", "--out", str(out), "--no-progress"]
    assert main(argv) == 0
    assert "3 samples" in capsys.readouterr().out
    ds = DarcyDataset(out, dtype=torch.float64)
    mem = darcy_samples({"train": meshio.read(mesh)}, 3, 4, "lognormal", preset("cao", modes=8),
                        dtype=torch.float64)
    torch.testing.assert_close(ds[2].y, mem["train"][2].y, rtol=0, atol=0)
    assert (tmp_path / "d.train.xdmf").exists()
    assert main(argv) == 0  # already complete: nothing to redo


def test_generate_from_recipe(tmp_path, meshes_dir):
    recipe = tmp_path / "small.toml"
    recipe.write_text(f"""
name = "small"
n = 2
grf = {{ preset = "cao", modes = 8 }}
[meshes.train]
path = "{meshes_dir / 'square_structured.vtu'}"
[meshes.graded]
family = "unit_square"
n = 6
kind = "graded"
""")
    assert main(["generate", "--recipe", str(recipe), "--no-progress", "--workers", "2"]) == 0
    ds = DarcyDataset(tmp_path / "small.h5", mesh="graded")
    assert len(ds) == 2 and set(ds[0].x.unique().tolist()) <= {3.0, 12.0}


def test_generate_errors(tmp_path, capsys):
    assert main(["generate", "darcy", "--n", "3"]) == 2
    assert "give --mesh" in capsys.readouterr().err
    assert main(["generate", "--recipe", str(tmp_path / "none.toml")]) == 2
