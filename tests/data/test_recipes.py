"""The recipes shipped in fem_data/ parse, build their meshes, and the smoke recipe generates."""

import pathlib

import pytest

from geoattn.data.dataset import DarcyDataset
from geoattn.data.generate import generate_darcy
from geoattn.data.recipe import load_recipe

FEM_DATA = pathlib.Path(__file__).resolve().parents[2] / "fem_data"
RECIPES = sorted(FEM_DATA.glob("*.toml"))


@pytest.mark.parametrize("path", RECIPES, ids=[p.stem for p in RECIPES])
def test_recipe_loads(path):
    recipe = load_recipe(path)
    assert recipe.name == path.stem
    meshes = recipe.load_meshes(path.parent)
    assert meshes and all(m.cells[-1].type == "triangle" for m in meshes.values())
    recipe.field()


def test_cross_mesh_family_sizes():
    meshes = load_recipe(FEM_DATA / "darcy_piecewise_square.toml").load_meshes(FEM_DATA)
    n = {k: len(m.points) for k, m in meshes.items()}
    assert n["train"] == 33**2 and n["refined4"] == 65**2 and n["refined16"] == 129**2


def test_smoke_recipe_generates(tmp_path):
    recipe = load_recipe(FEM_DATA / "darcy_smoke.toml")
    out = generate_darcy(tmp_path / "smoke.h5", recipe, progress=False, base=FEM_DATA)
    ds = DarcyDataset(out, mesh="irregular_refined")
    assert len(ds) == 8 and ds[7].num_nodes == 1089
