"""Why ViT-NO loses accuracy across meshes: one factor at a time.

    python benchmarks/vit_transfer.py [--epochs 25] [--mesh-n 16] [--seeds 0 1 2] [--quick]

A small ViT-NO is trained on Darcy samples (lognormal) of one irregular mesh of the unit square
and scored on the same test samples on the training mesh, its refinement, a graded mesh and a
foreign irregular mesh. Every number is a ratio: (mean weighted relative L2 error on the mesh) /
(the same on the training mesh), averaged over the initialisation seeds (``--seeds``; the data
stays the same), with the range over seeds for ``direct`` and ``latent``. Per trained variant
(modes, patches, partition method) the columns are

- ``direct``: the model run on the mesh with the training partition transferred (the default);
- ``vs fine``: the direct error against the same continuum sample solved on the training mesh
  refined twice (4 225 nodes at the default size) and interpolated to the mesh's nodes, in place
  of the mesh's own finite-element targets: what is left of ``direct`` without the targets'
  discretisation error;
- ``refit``: the same trained model with a partition fitted on the evaluation mesh (same method,
  patches and patch length ``L``): changes the shapes / node sets of the patches only;
- ``in@train``: the model run on the mesh with the training mesh's input function (the
  piecewise-linear interpolant of the input at the training nodes, read at the mesh's nodes):
  the same input function on both meshes, so what is left is the model's own discretisation;
- ``latent``: the model run through :class:`~geoattn.operators.LatentMeshOperator` on the
  training mesh (the input interpolated there, the output interpolated back): no
  discretisation effect of the model at all (what is left is data: the mesh's own FEM
  targets, the interpolation of input and output);
- ``coef@train``: the model run on the mesh, except that the raw patch Fourier coefficients of the
  lift (before the learned mode weights) are those of the training mesh's nodal quadrature (of
  the mesh's input interpolated there), evaluated at the mesh's nodes in their patch frames
  (the patches are the same under transfer): swaps only the lift's coefficient quadrature;
- ``coef@fine``: likewise with near-exact coefficients (the mesh's input interpolated to the
  training mesh refined twice, and its quadrature there).

When ``coef@train`` closes the gap, the lift's patch coefficients (their quadrature, i.e. their
aliasing) explain it; what remains is the rest (attention stencils and score quadratures, the
partition). Also printed: the fewest and median nodes per patch of the transferred partition on
every mesh with ``resolved_modes`` of the fewest, and the relative difference of the raw
coefficients from the near-exact ones for mode 0 (``dc0``) and the other modes (``dcK``), on the
mesh and (``_t``) on the training mesh. (Interpolating the lift's output between meshes instead
is no clean swap: it is discontinuous at the patch seams.)

The variants ``p1``, ``p1metis`` and ``P4p1`` (4 patches of about 70 nodes) train the model with ``quadrature="p1"``: the lift's patch
coefficients are the exact integrals of the piecewise-linear interpolant over each patch (RCB:
the triangles cut along the partition's planes; METIS: whole triangles by their vertices'
majority), in frames about the exact patch centroids; their ``coef@*`` columns swap in the P1
coefficients of the training and fine meshes. ``P4p1s`` is ``P4p1`` with ``scores="p1"`` as well: the
attention scores are the exact integrals of the products of the piecewise-linear interpolants over
each patch's region (its consistent mass matrix, :mod:`geoattn.nn.patch_mass`) instead of the
quadrature over its nodes.

The variants ``tok`` (ViT-NO), ``fano_tok`` (FANO; ``fano`` is FANO with ``quadrature="nodal"``),
``tok16`` (16 patches), ``tokK4`` and ``fano_tokK4`` (modes 4), ``fano_tokG8`` and
``fano_tokG6`` (grids of 8 and 6 points per axis) use ``quadrature="tokens"``: all
work on the patches' fixed reference grids, the input entering through its patch Fourier
coefficients (exact on its interpolant over each patch's region on these triangle meshes), the
output the grid functions read at the nodes. ``default`` and ``fano_default`` are the
constructors' defaults (the token design, 4 patches, modes 2, grid 16). Their ``coef@*`` and
``dc*`` columns do not apply (``–``).
``tok_blend`` and ``fano_blend`` are ``tok`` and ``fano_tok`` with ``readout="blend"`` (the
output read from every patch grid whose window holds the node, blended by a partition of unity,
in place of the own patch's grid only). ``fano_blendF3`` adds Remark 21's residual spectral
layer over the whole domain (``final_modes=3``, the modes the 289-node mesh resolves), computed
with the nodes' quadrature; ``fano_blendG12`` reads grids of 12 points per axis.

``--split D`` also prints, per variant and seed, the weighted RMS pointwise error over the test
samples on four classes of the refined mesh's nodes: the training mesh's nodes (``old``) and the
nodes refinement added (``new``), each within ``D`` of a node of another patch (``seam``) or not
(``in``), and the two classes of the training mesh (``train_seam``, ``train_in``): where the
error that the refinement adds lies.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import sys
import time

import numpy as np
import torch

from geoattn.data import darcy_samples
from geoattn.mesh import Mesh, families
from geoattn.mesh.interpolation import linear_interpolation
from geoattn.mesh.partition import partition as make_partition
from geoattn.models import build_model
from geoattn.nn.patch_attention import patch_coefficients, patch_evaluate
from geoattn.nn.spectral import resolved_modes
from geoattn.operators import LatentMeshOperator
from geoattn.train import NormalizedOperator, Trainer
from results_page import add_docs_argument, markdown_table, write_page
from timing import machine

MESHES = ("train", "refined", "graded", "foreign")
COLS = ("direct", "vs fine", "refit", "in@train", "latent", "coef@train", "coef@fine")


def build_meshes(n: int) -> dict:
    train = families.unit_square(n, "irregular", seed=0)
    return {"train": train, "refined": families.refine(train, 1), "graded": families.unit_square(n, "graded"),
            "foreign": families.unit_square(round(1.5 * n), "irregular", seed=1)}


def rel(pred: torch.Tensor, y: torch.Tensor, w: torch.Tensor) -> float:
    w = w[:, None].double()
    return float(torch.sqrt((w * (pred.double() - y.double()) ** 2).sum() / (w * y.double() ** 2).sum()))


def lift_coefficients(model, xn: torch.Tensor, mesh: Mesh) -> torch.Tensor:
    """The raw patch Fourier coefficients ``[P, M, C]`` of ViT-NO's lift input on ``mesh`` (the
    quadrature over each patch's nodes, before the learned mode weights)."""
    index = model.patch_index(mesh)
    if model.quadrature == "p1":  # exact on the P1 interpolant, in the frames of the exact centroids
        return patch_coefficients(model.inputs(xn, mesh.pos), index.unit[1], index.p1.geometry,
                                  model.lift.layer.mode_index, model.lift._zero, p1=index.p1)
    return patch_coefficients(model.inputs(xn, mesh.pos), index.unit[1], index.geometry,
                              model.lift.layer.mode_index, model.lift._zero)


def lift_from(model, coeff: torch.Tensor, mesh: Mesh) -> torch.Tensor:
    """The spectral lift on the nodes of ``mesh`` from raw patch coefficients ``coeff``."""
    layer, index = model.lift.layer, model.patch_index(mesh)
    geometry = index.p1.geometry if model.quadrature == "p1" else index.geometry
    return patch_evaluate(layer.mix(coeff), geometry, layer.mode_index, model.lift._zero)


def coefficient_gap(c: torch.Tensor, ref: torch.Tensor) -> tuple[float, float]:
    """Relative difference of the coefficients ``[P, M, C]`` from ``ref``, for mode 0 and the others."""
    zero = (c.shape[1] - 1) // 2
    d = (c - ref).abs().pow(2)
    r = ref.abs().pow(2)
    keep = [i for i in range(c.shape[1]) if i != zero]
    rest = float(torch.sqrt(d[:, keep].sum() / r[:, keep].sum())) if keep else float("nan")
    return float(torch.sqrt(d[:, zero].sum() / r[:, zero].sum())), rest


def spectral_lift(model, xn: torch.Tensor, mesh: Mesh) -> torch.Tensor:
    """The spectral part of ViT-NO's lift, ``lift(u)`` without ``lift_local(u)``."""
    index = model.patch_index(mesh)
    return model.lift(model.inputs(xn, mesh.pos), mesh.pos, mesh.weight, mesh.batch_vector, patches=index,
                      layout=mesh.layout)


def run_from_lift(op, spec: torch.Tensor, xn: torch.Tensor, mesh: Mesh) -> torch.Tensor:
    """The model on ``mesh`` with the spectral lift ``spec`` given (normalised input ``xn``)."""
    model = op.model
    index = model.patch_index(mesh)
    pos, weight, batch, layout = mesh.pos, mesh.weight, mesh.batch_vector, mesh.layout
    h = spec + model.lift_local(model.inputs(xn, pos))
    for block in model.blocks:
        h = block(h, pos, weight, batch, patches=index, layout=layout)
    z = model.project(h)
    if model.final is not None:
        z = z + model.final(z, pos, weight, batch)
    if model.smoothing is not None:
        z = model.smoothing(z, pos, weight, batch)
    return op.y_normalizer.decode(z)


def patch_counts(model, mesh: Mesh) -> tuple[int, int]:
    part = model.partitions(mesh)[0]
    counts = sorted(torch.bincount(part.transfer(mesh.pos), minlength=part.num_parts).tolist())
    return counts[0], counts[(len(counts) - 1) // 2]


def nodal_lift(model) -> bool:
    """Whether the model's lift is ViT-NO's patch Fourier lift on the nodes (the ``coef@*``
    columns swap its coefficients); with ``quadrature="tokens"`` or FANO's pointwise lift they
    do not apply."""
    return model.spectral_lift and model.quadrature != "tokens"


def evaluate(op, test: dict, meshes: dict, reference: list | None = None) -> dict:
    """Mean errors per mesh and column (see the module docstring)."""
    model = op.model
    train_part = model.partition
    tm = meshes["train"]
    fm = meshes["fine"]  # the training mesh refined twice: the quadrature reference
    fine_stencil = {name: linear_interpolation(meshes[name].pos.double(), fm.pos.double()) for name in test}
    latent = LatentMeshOperator(op, tm)
    fine_to = {name: linear_interpolation(fm.pos.double(), meshes[name].pos.double()) for name in test}
    out = {}
    with torch.no_grad():
        for name, samples in test.items():
            em = meshes[name]
            down = linear_interpolation(em.pos.double(), tm.pos.double())  # mesh -> train
            up = linear_interpolation(tm.pos.double(), em.pos.double())  # train -> mesh
            cols = {k: [] for k in COLS}
            gaps = []
            for d in samples:
                x_down = down(d.x.double()).to(d.x.dtype)
                cols["direct"].append(rel(op(d.x, em), d.y, d.weight))
                if reference is not None:  # the same continuum sample solved on the fine mesh, read at the nodes
                    y_ref = fine_to[name](reference[len(cols["vs fine"])].y.double()).to(d.y.dtype)
                    cols["vs fine"].append(rel(op(d.x, em), y_ref, d.weight))
                else:
                    cols["vs fine"].append(float("nan"))
                cols["latent"].append(rel(latent(d.x, em), d.y, d.weight))
                cols["in@train"].append(rel(op(up(x_down.double()).to(d.x.dtype), em), d.y, d.weight))
                if not nodal_lift(model):
                    cols["coef@train"].append(float("nan")), cols["coef@fine"].append(float("nan"))
                    gaps.append((float("nan"),) * 4)
                    continue
                xn_e, xn_t = op.x_normalizer.encode(d.x), op.x_normalizer.encode(x_down)
                c_mesh, c_train = lift_coefficients(model, xn_e, em), lift_coefficients(model, xn_t, tm)
                assert torch.allclose(lift_from(model, c_mesh, em), spectral_lift(model, xn_e, em), atol=1e-5)
                cols["coef@train"].append(rel(run_from_lift(op, lift_from(model, c_train, em), xn_e, em),
                                              d.y, d.weight))
                # near-exact coefficients: the mesh's P1 input interpolated to the fine mesh
                x_fine = fine_stencil[name](d.x.double()).to(d.x.dtype)
                c_fine = lift_coefficients(model, op.x_normalizer.encode(x_fine), fm)
                cols["coef@fine"].append(rel(run_from_lift(op, lift_from(model, c_fine, em), xn_e, em),
                                             d.y, d.weight))
                gaps.append(coefficient_gap(c_mesh, c_fine) + coefficient_gap(c_train, c_fine))
            fewest, median = patch_counts(model, em)
            # the same model with a partition fitted on this mesh (the training patch length kept)
            own = make_partition(em.pos, em.weight, train_part.num_parts, cells=em.cells, method=train_part.method)
            model.set_partition(dataclasses.replace(own, length=train_part.length))
            cols["refit"] = [rel(op(d.x, em), d.y, d.weight) for d in samples]
            model.set_partition(train_part)
            out[name] = {k: float(np.mean(v)) for k, v in cols.items()}
            out[name]["nodes/patch"] = (fewest, median)
            out[name]["cgap"] = tuple(np.mean(gaps, 0).tolist())
    base = out["train"]["direct"]
    for name in out:
        out[name]["abs"] = out[name]["direct"]
        for k in COLS:
            out[name][k] /= base
    return out


def node_split(op, test: dict, meshes: dict, seam: float) -> dict:
    """Where the refined mesh's error lies: the weighted RMS error of the nodes of the training
    mesh (``old``) and of the nodes refinement added (``new``), each split into nodes within
    ``seam`` of a node of another patch (``seam``) and the rest (``in``), over the test samples;
    also the same classes on the training mesh (``train_seam``, ``train_in``)."""
    from scipy.spatial import cKDTree
    model = op.model
    out = {}
    for name in ("train", "refined"):
        em, tm = meshes[name], meshes["train"]
        pos = em.pos.double().numpy()
        old = cKDTree(tm.pos.double().numpy()).query(pos)[0] < 1e-9
        patch = model.partitions(em)[0].transfer(em.pos).cpu().numpy()
        near = np.zeros(len(pos), bool)
        for p in np.unique(patch):
            other = pos[patch != p]
            near[patch == p] = cKDTree(other).query(pos[patch == p])[0] < seam
        err, w = [], em.weight.double().numpy()
        with torch.no_grad():
            for d in test[name]:
                err.append(((op(d.x, em) - d.y).double() ** 2).sum(1).numpy())
        err = np.mean(err, 0)
        classes = {"train": {"seam": near, "in": ~near}, "refined": {
            "old seam": old & near, "old in": old & ~near, "new seam": ~old & near, "new in": ~old & ~near}}[name]
        for key, mask in classes.items():
            rms = float(np.sqrt((w[mask] * err[mask]).sum() / w[mask].sum())) if mask.any() else float("nan")
            out[(f"train_{key}" if name == "train" else key)] = (rms, int(mask.sum()))
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mesh-n", type=int, default=16)
    parser.add_argument("--n-train", type=int, default=96)
    parser.add_argument("--n-test", type=int, default=8)
    parser.add_argument("--epochs", type=int, default=25)
    parser.add_argument("--width", type=int, default=32)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0],
                        help="initialisation seeds, one trained model each (default: 0); the data stays the same")
    parser.add_argument("--quick", action="store_true", help="the base variant only")
    parser.add_argument("--variants", nargs="*", default=None,
                        help="names among: base modes0 modes1 P4 P4m1 metis p1 p1metis P4p1 P4p1s tok default fano "
                             "fano_tok fano_default (p1: the lift's patch coefficients exact on the P1 interpolant, "
                             "quadrature='p1'; s: the attention scores too, scores='p1'; tok: quadrature='tokens'; "
                             "default: the constructor's defaults)")
    parser.add_argument("--split", type=float, default=None,
                        help="also print node_split (old/new nodes of the refined mesh, near/away from the "
                             "patch seams within this distance) per variant and seed")
    add_docs_argument(parser)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    t0 = time.time()
    raw = build_meshes(args.mesh_n)
    train = darcy_samples({"train": raw["train"]}, args.n_train, seed=0, family="lognormal")["train"]
    test = darcy_samples(raw, args.n_test, seed=0, family="lognormal", start=args.n_train)
    meshes = {name: Mesh.from_sample(s[0]) for name, s in test.items()}
    fine = darcy_samples({"fine": families.refine(raw["train"], 2)}, args.n_test, seed=0, family="lognormal",
                         start=args.n_train)["fine"]
    meshes["fine"] = Mesh.from_sample(fine[0])
    print(f"data {time.time() - t0:.0f}s; nodes: " + ", ".join(f"{k} {m.num_nodes}" for k, m in meshes.items()))
    variants = {"base": dict(num_patches=16, modes=2), "modes0": dict(num_patches=16, modes=0),
                "modes1": dict(num_patches=16, modes=1), "P4": dict(num_patches=4, modes=2),
                "P4m1": dict(num_patches=4, modes=1),
                "metis": dict(num_patches=16, modes=2, partition_method="metis"),
                "p1": dict(num_patches=16, modes=2, quadrature="p1"),
                "p1metis": dict(num_patches=16, modes=2, partition_method="metis", quadrature="p1"),
                "P4p1": dict(num_patches=4, modes=2, quadrature="p1"),
                "P4p1s": dict(num_patches=4, modes=2, quadrature="p1", scores="p1"),
                "tok": dict(num_patches=4, modes=2, quadrature="tokens"),
                "tokK4": dict(num_patches=4, modes=4, quadrature="tokens"),
                "fano_tokK4": dict(model="fano", num_patches=4, modes=4, quadrature="tokens"),
                "fano_tokG8": dict(model="fano", num_patches=4, modes=2, quadrature="tokens", grid=8),
                "fano_tokG6": dict(model="fano", num_patches=4, modes=2, quadrature="tokens", grid=6),
                "tok16": dict(num_patches=16, modes=2, quadrature="tokens"),
                "default": dict(),
                "fano": dict(model="fano", num_patches=4, modes=2, quadrature="nodal"),
                "fano_tok": dict(model="fano", num_patches=4, modes=2, quadrature="tokens"),
                "fano_default": dict(model="fano"),
                "tok_blend": dict(num_patches=4, modes=2, quadrature="tokens", readout="blend"),
                "fano_blend": dict(model="fano", num_patches=4, modes=2, quadrature="tokens", readout="blend"),
                "fano_blendF3": dict(model="fano", num_patches=4, modes=2, quadrature="tokens", readout="blend",
                                     final_modes=3),
                "fano_blendG12": dict(model="fano", num_patches=4, modes=2, quadrature="tokens", readout="blend",
                                      grid=12)}
    chosen = ["base"] if args.quick else (args.variants or list(variants))
    rows = []
    for name in chosen:
        kw = dict(variants[name])
        model_name = kw.pop("model", "vit")
        if name not in ("default", "fano_default"):
            kw = dict(partition_method="rcb") | kw
        runs = []
        for seed in args.seeds:
            torch.manual_seed(seed)
            model = build_model(model_name, in_channels=1, out_channels=1, width=args.width, depth=2, num_heads=4,
                                **kw)
            kw_used = {k: model.hparams[k] for k in ("num_patches", "modes", "quadrature")}
            kw_used["quadrature"] = model.quadrature
            op = NormalizedOperator(model)
            t = time.time()
            Trainer(op, epochs=args.epochs, batch_size=4, lr=3e-3, progress=False).fit(train)
            op.eval()
            runs.append(evaluate(op, test, meshes, fine))
            if args.split is not None:
                print(f"{name} seed {seed} split (weighted RMS error, nodes): " + ", ".join(
                    f"{k} {v[0]:.4f} ({v[1]})" for k, v in node_split(op, test, meshes, args.split).items()))
            print(f"{name} seed {seed}: trained and scored {time.time() - t:.0f}s, train-mesh error "
                  f"{runs[-1]['train']['abs']:.4f}, direct ratios " + ", ".join(
                      f"{mesh} {r['direct']:.3f}" for mesh, r in runs[-1].items() if mesh != "train"), flush=True)
        rows.append((name, kw_used | {"model": model_name}, combine(runs)))
    print("\nratios (mesh error / training-mesh error), mean over seeds [range]; nodes/patch = fewest/median of "
          "the transferred partition; K_res = resolved_modes(fewest)")
    head = ["variant", "model", "quadrature", "P", "K", "mesh", "error", *COLS, "nodes/patch", "K_res", "dc0", "dcK", "dc0_t", "dcK_t"]
    body = [[name, kw["model"], kw["quadrature"], kw["num_patches"], kw["modes"], mesh, f"{r['abs']:.4f}",
             *(cell(r, c) for c in COLS), "{}/{}".format(*r["nodes/patch"]), resolved_modes(r["nodes/patch"][0], 2),
             *("–" if np.isnan(g) else f"{g:.3f}" for g in r["cgap"])]
            for name, kw, res in rows for mesh, r in res.items()]
    table = markdown_table(head, body)
    print(table)
    print(f"total {time.time() - t0:.0f}s")
    if args.docs:
        write_page(args.docs, "Why ViT-NO loses accuracy across meshes (`benchmarks/vit_transfer.py`)",
                   " ".join(["python", "benchmarks/vit_transfer.py", *(argv if argv is not None else sys.argv[1:])]),
                   table, f"{machine(torch.device('cpu'))}; {time.time() - t0:.0f} s; load "
                   f"{os.getloadavg()[0]:.1f} at the end")
    return rows


def combine(runs: list[dict]) -> dict:
    """The mean over seeds of every mesh's numbers, with the range (``lo``, ``hi``) of each ratio."""
    out = {}
    for mesh in runs[0]:
        r = {k: float(np.mean([run[mesh][k] for run in runs])) for k in ("abs", *COLS)}
        r["range"] = {k: (min(run[mesh][k] for run in runs), max(run[mesh][k] for run in runs)) for k in COLS}
        r["nodes/patch"] = runs[0][mesh]["nodes/patch"]
        r["cgap"] = tuple(np.mean([run[mesh]["cgap"] for run in runs], 0).tolist())
        out[mesh] = r
    return out


def cell(r: dict, col: str) -> str:
    """A ratio's mean, with its range over seeds for ``direct`` and ``latent`` when it has one."""
    lo, hi = r["range"][col]
    if np.isnan(r[col]):
        return "–"
    if col in ("direct", "vs fine", "latent") and hi > lo:
        return f"{r[col]:.3f} [{lo:.2f}–{hi:.2f}]"
    return f"{r[col]:.3f}"


if __name__ == "__main__":
    main()
