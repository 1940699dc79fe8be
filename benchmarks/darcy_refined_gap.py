"""Where a model's error on the refined mesh comes from: the finer input, or the finer computation.

    python benchmarks/darcy_refined_gap.py --mesh-n 32 --seconds 300 --families lognormal

The refined mesh of ``darcy_compare.py`` is the training mesh refined once (red refinement): it
keeps the training mesh's nodes first and in order, and its piecewise-linear functions contain
the training mesh's. A model trained on the training mesh is scored on the refined mesh's test
samples in four ways, each the mean over the test samples of the weighted relative L2 error
against the refined mesh's own targets:

- ``train``: on the training mesh (the reference);
- ``refined``: run on the refined mesh, as ``darcy_compare.py`` scores it; also split into the
  training mesh's nodes (``old nodes``) and the new ones;
- ``coarse input``: run on the refined mesh with the coefficient of the training mesh,
  interpolated linearly to the new nodes: the same piecewise-linear input function as on the
  training mesh, so only the computation is finer;
- ``coarse run``: run on the training mesh, its output interpolated linearly to the refined
  mesh's nodes (a model that never computes finer than it was trained).

Also printed: how far the refined run's output at the old nodes is from the training-mesh run's
(relative), and how far the two coefficients are apart. When ``coarse input`` is as far off as
``refined`` and ``coarse run`` is not, the gap comes from the model's own discretisation (its
pointwise nonlinearities evaluated on finer nodes), not from the finer coefficient.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from darcy.meshes import benchmark_meshes, coefficient_field, solve_samples  # noqa: E402
from darcy.race import SCALES, run_family  # noqa: E402

from geoattn.mesh import Mesh  # noqa: E402
from geoattn.mesh.interpolation import linear_interpolation  # noqa: E402

log = logging.getLogger("darcy_refined_gap")

COLUMNS = ("train", "refined", "old nodes", "new nodes", "coarse input", "coarse run",
           "refined vs coarse output at old nodes", "coefficient difference")


def relative(pred: torch.Tensor, y: torch.Tensor, weight: torch.Tensor, nodes=slice(None)) -> float:
    """Weighted relative L2 error of ``pred`` against ``y`` on ``nodes``."""
    w = weight[nodes, None].double()
    d, y = (pred - y)[nodes].double(), y[nodes].double()
    return float(torch.sqrt((w * d**2).sum() / (w * y**2).sum()))


def gap(op: torch.nn.Module, coarse: list, fine: list) -> dict[str, float]:
    """The scores of the module docstring, means over the paired test samples ``coarse`` (on the
    training mesh) and ``fine`` (the same samples on its refinement)."""
    n = coarse[0].num_nodes
    if not torch.allclose(fine[0].pos[:n], coarse[0].pos, rtol=0, atol=1e-12):
        raise ValueError("the fine mesh must keep the coarse mesh's nodes first and in order")
    up = linear_interpolation(coarse[0].pos.double(), fine[0].pos.double())
    coarse_mesh, fine_mesh = Mesh.from_sample(coarse[0]), Mesh.from_sample(fine[0])  # one per mesh
    rows = []
    with torch.no_grad():
        for c, f in zip(coarse, fine):
            on_coarse = op(c.x, coarse_mesh)
            on_fine = op(f.x, fine_mesh)
            x_up = up(c.x.double()).to(f.x.dtype)
            rows.append([relative(on_coarse, c.y, c.weight),
                         relative(on_fine, f.y, f.weight),
                         relative(on_fine, f.y, f.weight, slice(0, n)),
                         relative(on_fine, f.y, f.weight, slice(n, None)),
                         relative(op(x_up, fine_mesh), f.y, f.weight),
                         relative(up(on_coarse.double()), f.y, f.weight),
                         float((on_fine[:n] - on_coarse).norm() / on_coarse.norm()),
                         float((x_up - f.x).norm() / f.x.norm())])
    return dict(zip(COLUMNS, np.mean(rows, 0).tolist()))


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", default="cpu", choices=sorted(SCALES))
    parser.add_argument("--mesh-n", type=int, default=32)
    parser.add_argument("--n-train", type=int, default=200)
    parser.add_argument("--n-test", type=int, default=50)
    parser.add_argument("--validation", type=int, default=20)
    parser.add_argument("--seconds", type=float, default=120.0, help="training time per model (seconds, measured as it trains)")
    parser.add_argument("--epochs", type=int, default=None, help="train this many epochs instead of --seconds")
    parser.add_argument("--families", nargs="+", default=["lognormal"])
    parser.add_argument("--models", nargs="+", default=["mesh_fno"])
    parser.add_argument("--modes", type=int, default=16,
                        help="FNO's modes of the race; mesh_fno's default modes are capped at half of them")
    parser.add_argument("--mesh-fno-modes", type=int, default=None, help="mesh_fno's modes (default: the race's)")
    parser.add_argument("--quadrature", default="p1", choices=["nodal", "p1"])
    parser.add_argument("--mix-resolution", type=float, default=0.0, metavar="P",
                        help="train a share P of the batches on the training mesh refined once (darcy_compare.py)")
    parser.add_argument("--symmetries", action="store_true",
                        help="train on the square's eight images of every training sample")
    parser.add_argument("--out", type=Path, default=None, help="folder for results.json")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    torch.set_num_threads(1)
    scale = replace(SCALES[args.scale], mesh_n=args.mesh_n, n_train=args.n_train, n_test=args.n_test,
                    validation=args.validation, seconds=None if args.epochs else args.seconds,
                    modes=args.modes, mesh_fno_modes=args.mesh_fno_modes,
                    quadrature=args.quadrature, symmetries=args.symmetries, mix_resolution=args.mix_resolution,
                    epochs=args.epochs or 10**6)  # with a budget, epochs only caps it
    meshes = benchmark_meshes(scale.mesh_n)
    field = coefficient_field(meshes)
    results = {}
    for family in args.families:
        run = run_family(family, scale, args.models, torch.device("cpu"))
        test = solve_samples({k: meshes[k] for k in ("train", "refined")}, scale.n_test, 0, family, field,
                                start=scale.n_train)
        for name, op in run["operators"].items():
            results[f"{family} {name}"] = scores = gap(op, test["train"], test["refined"])
            log.info("%s %s (%d epochs): %s", family, name, run["models"][name]["epochs"],
                     {k: round(v, 4) for k, v in scores.items()})
    print(" | ".join(["family, model", *COLUMNS]))
    for key, scores in results.items():
        print(" | ".join([key, *(f"{v:.4f}" for v in scores.values())]))
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "results.json").write_text(json.dumps({"scale": vars(args) | {"out": str(args.out)},
                                                           "results": results}, indent=1))
    return results


if __name__ == "__main__":
    main()
