"""``geoattn generate``: generate a multi-mesh Darcy dataset file (resumable, parallel).

Either from a recipe, ``geoattn generate --recipe fem_data/NAME.toml`` (written to
``fem_data/NAME.h5`` unless ``--out`` is given), or from arguments,
``geoattn generate darcy --mesh train=meshes/a.vtu --mesh meshes/b.vtu --n 100 --seed 0 --out FILE``.
Running the same command again on an interrupted file resumes it. Ctrl-C or ``SIGTERM`` stops
the generation after the sample being written, keeping every complete sample, with exit status
130 (``SIGINT``) or 143 (``SIGTERM``) and one line on stderr (:mod:`geoattn.cli.main`).
"""

from __future__ import annotations

import argparse
import logging
import os
from pathlib import Path

from ..errors import ConfigError

log = logging.getLogger(__name__)
#: said after ``geoattn generate: interrupted by SIGINT`` (:func:`geoattn.cli.main.main`)
INTERRUPTED = "; the complete samples are kept: run the same command again to resume"


def add_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("problem", nargs="?", choices=["darcy"], help="the PDE (default: darcy)")
    parser.add_argument("--recipe", help="TOML recipe (see fem_data/README.md)")
    parser.add_argument("--mesh", action="append", default=[], metavar="[NAME=]PATH",
                        help="a mesh file; repeat for several meshes (NAME defaults to the file stem)")
    parser.add_argument("--n", type=int, help="number of samples")
    parser.add_argument("--seed", type=int, default=0, help="stream seed (default 0)")
    parser.add_argument("--family", default="piecewise", choices=["piecewise", "lognormal"],
                        help="coefficient family (default piecewise)")
    parser.add_argument("--grf", default="cao", help="Gaussian random field preset (default cao)")
    parser.add_argument("--modes", type=int, default=None, help="GRF modes per axis")
    parser.add_argument("--out", help="output .h5 file")
    parser.add_argument("--workers", type=int, default=1,
                        help="processes (0: all cores; default 1)")
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")


def _mesh_specs(items: list[str]) -> dict[str, dict]:
    specs = {}
    for item in items:
        name, _, path = item.rpartition("=")
        name = name or Path(path).stem
        if name in specs:
            raise ConfigError(f"two meshes are named {name!r}; name them with NAME=PATH")
        specs[name] = {"path": path}
    return specs


def run(args: argparse.Namespace) -> int:
    from ..data.generate import generate_darcy
    from ..data.recipe import Recipe, load_recipe

    if args.recipe:
        if args.mesh or args.n is not None:
            raise ConfigError("give either --recipe or --mesh/--n, not both")
        recipe = load_recipe(args.recipe)
        base = Path(args.recipe).resolve().parent
        out = Path(args.out) if args.out else base / f"{recipe.name}.h5"
    else:
        if not args.mesh or args.n is None or not args.out:
            raise ConfigError("without --recipe, give --mesh PATH (one or more), --n N and --out FILE")
        grf = {"preset": args.grf}
        if args.modes is not None:
            grf["modes"] = args.modes
        recipe = Recipe(meshes=_mesh_specs(args.mesh), n=args.n, seed=args.seed,
                        family=args.family, grf=grf, name=Path(args.out).stem or "darcy")
        base, out = None, Path(args.out)
    if args.workers < 0:
        raise ConfigError(f"--workers must be >= 0 (0: all cores), got {args.workers}")
    path = generate_darcy(out, recipe, workers=args.workers or os.cpu_count() or 1,
                          progress=not args.no_progress, base=base)
    log.info("wrote %s", path)
    print(f"{path}: {recipe.n} samples on meshes {sorted(recipe.meshes)}")
    return 0
