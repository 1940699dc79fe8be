"""Generate a multi-mesh Darcy dataset file from a recipe: parallel, with progress, resumable.

Every sample is solved on every mesh of the recipe (the same continuum coefficient on each) and
written to the file as soon as it is done, with its completion flag. Running the same generation
again on an existing file checks that the recipe and meshes match and solves only the samples
that are not flagged done, so an interrupted generation resumes without redoing work.
"""

from __future__ import annotations

import datetime
import logging
import multiprocessing
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import meshio
import numpy as np
import torch

from .. import __version__
from ..errors import DatasetFileError
from ..mesh import from_meshio
from ..optional import progress as progress_bar, require
from .darcy import DarcyProblem, solve_sample
from .dataset import FORMAT, FORMAT_VERSION, crc32, open_dataset_file
from .recipe import Recipe
from .xdmf import write_xdmf

h5py = require("h5py", "data", "dataset files")
log = logging.getLogger(__name__)

_WORKER: dict = {}


def _init_worker(recipe_json: str, meshes: dict[str, meshio.Mesh]) -> None:
    recipe = Recipe.from_json(recipe_json)
    _WORKER.update(recipe=recipe, field=recipe.field(),
                   problems={name: DarcyProblem(m) for name, m in meshes.items()})


def _solve(index: int):
    r = _WORKER["recipe"]
    return index, solve_sample(_WORKER["problems"], _WORKER["field"], r.seed, index, r.family, r.f)


def _create(path: Path, recipe: Recipe, meshes: dict[str, meshio.Mesh]) -> None:
    tmp = path.with_name(path.name + ".partial")
    with h5py.File(tmp, "w") as fh:
        fh.attrs.update(format=FORMAT, format_version=FORMAT_VERSION, geoattn_version=__version__,
                        recipe=recipe.to_json(), n=recipe.n, seed=recipe.seed,
                        created=datetime.datetime.now(datetime.timezone.utc).isoformat())
        fh.create_dataset("done", data=np.zeros(recipe.n, dtype=np.uint8))
        group = fh.create_group("meshes")
        for name, mesh in meshes.items():
            data = from_meshio(mesh, dtype=torch.float64)
            points = data.pos.double().numpy()
            cells = data.cells.numpy().astype(np.int64)
            weight = data.weight.double().numpy()
            g = group.create_group(name)
            g.create_dataset("points", data=points)
            g.create_dataset("cells", data=cells)
            g.create_dataset("weight", data=weight)
            g.attrs.update(cell_type=data.cell_type, checksum=crc32(points, cells, weight))
            n_nodes = len(points)
            for key in ("x", "y"):
                g.create_dataset(key, shape=(recipe.n, n_nodes), dtype="f8",
                                 chunks=(1, n_nodes))
            g.create_dataset("checksum", shape=(recipe.n,), dtype="u4")
    tmp.replace(path)  # the file appears only once its header and meshes are complete


def _check_same(path: Path, fh: h5py.File, recipe: Recipe) -> None:
    stored = Recipe.from_json(str(fh.attrs["recipe"]))
    if stored != recipe:
        raise DatasetFileError(
            f"{path} exists and was made by a different recipe ({stored.to_json()}); delete it or "
            "write to another file")


def generate_darcy(path: str | Path, recipe: Recipe, *, workers: int = 1, progress: bool = True,
                   base: Path | None = None, xdmf: bool = True) -> Path:
    """Generate (or resume) the dataset file of ``recipe`` at ``path``.

    Args:
        path: output ``.h5`` file; its folder is created.
        recipe: what to generate.
        workers: processes (``1``: in this process). (default: ``1``)
        progress: show a progress bar, with tqdm (the ``progress`` extra). (default: ``True``)
        base: folder against which relative mesh paths of the recipe resolve (its folder).
        xdmf: write the ParaView companions ``<path stem>.<mesh>.xdmf``. (default: ``True``)

    Returns:
        The path of the dataset file.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    meshes = recipe.load_meshes(base)
    if not path.exists():
        _create(path, recipe, meshes)
    with open_dataset_file(path) as fh:
        _check_same(path, fh, recipe)
        todo = np.flatnonzero(fh["done"][:] == 0).tolist()
    if len(todo) < recipe.n:
        log.info("%s: resuming, %d of %d samples already done", path, recipe.n - len(todo), recipe.n)
    if todo:
        with open_dataset_file(path, "r+") as fh:
            bar = progress_bar(total=recipe.n, initial=recipe.n - len(todo), enabled=progress,
                               desc=path.name, unit="sample")
            for index, result in _results(recipe, meshes, todo, workers):
                for name, (x, y) in result.items():
                    g = fh["meshes"][name]
                    g["x"][index], g["y"][index] = x, y
                    g["checksum"][index] = crc32(x, y)
                fh["done"][index] = 1
                fh.flush()
                bar.update()
            bar.close()
    if xdmf:
        write_xdmf(path)
    return path


def _results(recipe: Recipe, meshes, todo: list[int], workers: int):
    if not todo:
        return
    if workers <= 1:
        _init_worker(recipe.to_json(), meshes)
        for i in todo:
            yield _solve(i)
        return
    ctx = multiprocessing.get_context("fork" if sys.platform.startswith("linux") else "spawn")
    with ProcessPoolExecutor(workers, mp_context=ctx, initializer=_init_worker,
                             initargs=(recipe.to_json(), meshes)) as pool:
        yield from pool.map(_solve, todo, chunksize=max(1, min(8, len(todo) // (4 * workers))))


__all__ = ["generate_darcy"]
