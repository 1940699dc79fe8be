"""An ensemble for the budget of one model: where the samples, not the steps, limit the error.

With a hundred Darcy samples and piecewise-constant coefficients a mesh-native FNO fits its
training set long before its schedule ends, and its test error is set by what those samples leave
undetermined. Models trained from other initial weights and sample orders err differently there,
and their mean (:class:`geoattn.train.Ensemble`) errs less: per sample, the mean's relative error is
at most the members' average (the triangle inequality), and in mean square it is less by the
members' variance.

One model is trained for ``--epochs`` epochs, and ``--members`` models for ``epochs / members``
each (:func:`geoattn.train.train_ensemble`), all keeping their best epoch on validation samples;
all are scored on test samples of the training mesh and of another irregular mesh. The members' spread
(:meth:`~geoattn.train.Ensemble.spread`) comes with the mean: the last line gives its correlation
with the mean's pointwise error, and ``--plot`` draws both on one test sample.

Run: ``python examples/ensemble.py [--train 100] [--epochs 300] [--members 3] [--plot ensemble.png]``
(a few minutes on one CPU core; ``benchmarks/darcy_compare.py --ensemble`` is the full race).
"""

from __future__ import annotations

import argparse

import numpy as np
import torch

from geoattn.data import darcy_samples
from geoattn.eval import cross_mesh_report
from geoattn.mesh import families
from geoattn.models import build_model
from geoattn.train import NormalizedOperator, Trainer, train_ensemble


def make(width: int, depth: int):
    return lambda: NormalizedOperator(build_model("mesh_fno", in_channels=1, out_channels=1, dim=2, width=width,
                                                  depth=depth, modes=3))


def main(train: int = 100, test: int = 10, val: int = 10, epochs: int = 300, members: int = 3,
         width: int = 16, depth: int = 2, plot: str | None = None):
    meshes = {"train": families.unit_square(12, "irregular"), "other": families.unit_square(18, "irregular", seed=1)}
    train_set = darcy_samples({"train": meshes["train"]}, train, seed=0, family="piecewise")["train"]
    val_set = darcy_samples({"train": meshes["train"]}, val, seed=0, family="piecewise", start=train + test)["train"]
    test_sets = darcy_samples(meshes, test, seed=0, family="piecewise", start=train)
    settings = dict(batch_size=4, lr=1e-3, progress=False, restore_best=True)

    torch.manual_seed(0)
    single = make(width, depth)()
    Trainer(single, epochs=epochs, seed=0, **settings).fit(train_set, val_set)
    ensemble = train_ensemble(make(width, depth), train_set, val_set, members=members,
                              epochs=max(1, epochs // members), **settings)
    operators = {"one model": single, f"mean of {members}": ensemble,
                 **{f"member {k}": m for k, m in enumerate(ensemble.members)}}
    report = cross_mesh_report(operators, test_sets, reference="train")
    print(report.table())

    errors, spreads = [], []
    ensemble.eval()
    with torch.no_grad():
        other = test_sets["other"]
        for s in other:
            mesh = other.meshes[s.mesh_id]  # the samples' one Mesh, its structure built once
            errors.append((ensemble(s.x, mesh) - s.y).abs().flatten())
            spreads.append(ensemble.spread(s.x, mesh).flatten())
    correlation = float(np.corrcoef(torch.cat(errors).numpy(), torch.cat(spreads).numpy())[0, 1])
    print(f"other mesh: correlation of the members' spread with the mean's pointwise error {correlation:.2f}")
    if plot:
        draw(test_sets["other"], ensemble, plot)
    return report, correlation


def draw(samples, ensemble, path: str) -> None:
    """The mean's pointwise error and the members' spread on the first of ``samples``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.tri as mtri

    sample = samples[0]
    mesh = samples.meshes[sample.mesh_id]
    with torch.no_grad():
        error = (ensemble(sample.x, mesh) - sample.y)[:, 0].abs()
        spread = ensemble.spread(sample.x, mesh)[:, 0]
    pos = sample.pos.numpy()
    tri = mtri.Triangulation(pos[:, 0], pos[:, 1], sample.cells.numpy())
    fig, axes = plt.subplots(1, 2, figsize=(8.5, 3.6))
    for ax, (title, values) in zip(axes, (("|mean - truth|", error), ("members' spread", spread))):
        art = ax.tripcolor(tri, values.numpy(), shading="gouraud", cmap="magma")
        ax.set_title(title)
        ax.set_aspect("equal")
        ax.set_xticks([])
        ax.set_yticks([])
        fig.colorbar(art, ax=ax, shrink=0.8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    print(f"wrote {path}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--train", type=int, default=100)
    parser.add_argument("--epochs", type=int, default=300)
    parser.add_argument("--members", type=int, default=3)
    parser.add_argument("--plot", help="draw the mean's error and the members' spread on a test sample")
    args = parser.parse_args()
    main(train=args.train, epochs=args.epochs, members=args.members, plot=args.plot)
