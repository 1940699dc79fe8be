"""NAO accuracy benchmarks: the radial kernel problem (paper Table 1) and Darcy g -> p (Table 3).

Run ``python benchmarks/nao.py radial`` or ``python benchmarks/nao.py darcy`` (CPU defaults take a
few minutes each; see ``--help``). Results are logged and written as JSON to ``--out``; kernel
pictures go to ``--figures``.

``python benchmarks/nao.py radial --scale paper --out radial_paper.json`` trains the paper's
model of Table 1 (d = 302, d_k = 10, L = 2, the seven sine kernels at dx = 0.0125) by Adam with
the authors' schedule (:data:`RADIAL_PAPER`) instead of the least-squares kernel layer, and prints
its errors beside the paper's. It checkpoints into ``radial_paper_runs/runs/radial-L2`` every
``--checkpoint-every`` epochs: the same command again continues a run cut off, and reports a
finished one without training.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

from geoattn.data.darcy import PiecewiseConstant
from geoattn.data.grf import GaussianRandomField, preset
from geoattn.mesh import families, from_meshio
from geoattn.nao.radial import LOADINGS
from geoattn.nao import (NAO, RadialKernelProblem, RadialSamples, TokenMesh, diverse_kernels,
                         fit_adam, fit_kernel_layer, gaussian_kernel, green_kernel, kernel_error,
                         microstructure_tasks, normal_equations, ood1_kernel, operator_error,
                         radial_density, recover_microstructure, sine_kernel)
from runs import ModelRun
from results_page import add_docs_argument, markdown_table, write_page
from timing import machine

log = logging.getLogger("benchmarks.nao")

#: ``radial --scale paper``: Table 1's NAO (d = 302, d_k = 10, "3-layer" = L = 2, the seven sine
#: kernels, dx = 0.0125: the paper's) trained as the authors' code does (the paper gives no
#: training settings): Adam, learning rate 3e-3 times 0.9 every 100 epochs, weight decay 1e-5,
#: 20000 epochs, batch 10, float64, with the code's normaliser of the hidden layer (token_norm).
#: Ours: gradient clipping 1 (fit_adam's), the last epoch's model (the code keeps the best
#: training loss), our global-scale normalisation of u and f.
RADIAL_PAPER = {"dx": 0.0125, "d": 302, "dk": 10, "layers": 2, "train_set": "sine", "epochs": 20000,
                "lr": 3e-3, "batch": 10, "weight_decay": 1e-5, "step_size": 100, "token_norm": True}
#: Table 1, NAO, d = 302, d_k = 10: operator (E_f) and kernel (E_K) errors.
PAPER_RADIAL = {"ID": {"E_f": 0.0148, "E_K": 0.0540}, "OOD1": {"E_f": 0.0810, "E_K": 0.1002}}


def _errors(K, s):
    """E_f and E_K ``[S]`` of radial kernels ``K [S, N]`` on the samples ``s``."""
    pred = torch.einsum("sn,n,snd->sd", K, s.mesh.weight[0], s.u)[:, None]  # (S, 1, d)
    ef = operator_error(pred, s.f, s.mesh_query.weight)
    ek = kernel_error(K[:, None], s.kernel[None, None], s.mesh_query.weight, s.mesh.weight,
                      radial_density(s.u))
    return ef, ek


def radial_baselines(train, tests, ridge=1e-4):
    r"""Reference numbers that need no training, on the same samples:

    - ``true``: the true kernel in the model's Riemann sum (the quadrature floor of E_f);
    - ``ridge``: the ridge-regularised kernel of each sample from its own d pairs (App. B.2 of
      the paper with :math:`W = I`);
    - ``fixed``: the best kernel of the model's form :math:`K = U\omega + b` with one
      :math:`(\omega, b)` shared by all samples of a task (least squares per task), i.e. NAO
      without data-dependent attention;
    - ``span``: each sample's kernel fitted to its own pairs within the span of the training
      kernels (the best a learned prior of exactly those kernels can do).
    """
    out = {}
    span = torch.stack([s.kernel for s in train], 1)  # (N, 7)
    for split, s in {"train(eta=1)": train[0], **tests}.items():
        wu = s.mesh.weight[..., None] * s.u  # (S, N, d)
        A = wu.transpose(1, 2)  # (S, d, N): pred = A K
        eye = torch.eye(A.shape[2], dtype=A.dtype)
        Kr = torch.linalg.solve(A.transpose(1, 2) @ A + ridge * eye,
                                (A.transpose(1, 2) @ s.f[:, 0, :, None]))[..., 0]  # (S, N)
        H = torch.cat([A @ s.u, A.sum(2, keepdim=True)], 2)  # (S, d, d+1): pred = H [omega; b]
        scale = s.f[:, 0].norm(dim=1)[:, None, None]
        Hs, ys = (H / scale).flatten(0, 1), (s.f[:, 0, :, None] / scale).flatten(0, 1)
        c = torch.linalg.lstsq(Hs, ys).solution[:, 0]  # (d+1,)
        Kf = s.u @ c[:-1] + c[-1]  # (S, N)
        cs = torch.linalg.lstsq(A @ span, s.f[:, 0, :, None]).solution[..., 0]  # (S, 7)
        out[split] = {}
        for name, K in (("true", s.kernel.expand(len(s.u), -1)), ("ridge", Kr), ("fixed", Kf),
                        ("span", cs @ span.T)):
            ef, ek = _errors(K, s)
            out[split][name] = {"E_f": float(ef.mean()), "E_K": float(ek.mean())}
    log.info("baselines: %s", out)
    return out


def _best_coefficients(model, s, su, sf):
    """E_f and E_K of the kernels ``K = B p`` in the span of the trained key features
    ``B = [U, 1] [W^K; b^K]`` with each sample's coefficients ``p`` fitted to its own pairs:
    how much of the error is the key basis, and how much the query map's choice of ``p``."""
    key = model.kernel_attention.key
    U, _ = model.hidden_tokens(s.u / su, s.f / sf, s.mesh, s.mesh_query)
    B = key(U) * (sf / su)  # (S, N, k)
    A = torch.einsum("snk,n,snd->sdk", B, s.mesh.weight[0], s.u)  # pred = A p
    p = torch.linalg.lstsq(A, s.f[:, 0, :, None]).solution  # (S, k, 1)
    ef, ek = _errors((B @ p)[..., 0], s)
    return {"E_f": float(ef.mean()), "E_K": float(ek.mean())}


@torch.no_grad()
def _score_radial(model, train, tests, u, f, systems, su, sf, kernels, name) -> dict:
    """E_f and E_K of ``model`` on the training samples (``u``, ``f``) and on each test split;
    every test sample's kernel of each split goes to ``kernels[(name, split)]`` ``[S, N]``."""
    out, s0 = {}, train[0]
    for split, s in {"train": None, **tests}.items():
        su_, sf_ = (u, f) if s is None else (s.u, s.f)
        m, mq = (s0.mesh, s0.mesh_query) if s is None else (s.mesh, s.mesh_query)
        pred = model.forward_dense(su_ / su, sf_ / sf, m, mq) * sf
        K = model.kernel_dense(su_ / su, sf_ / sf, m, mq)[:, 0] * (sf / su)  # (S, N)
        truth = (torch.stack([t.kernel for t in train])[systems] if s is None
                 else s.kernel.expand(len(K), -1))
        ef = operator_error(pred, sf_, mq.weight)
        ek = kernel_error(K[:, None], truth[:, None], mq.weight, m.weight, radial_density(su_))
        out[split] = {"E_f": float(ef.mean()), "E_K": float(ek.mean()),
                      "E_K_range": [float(ek.min()), float(ek.max())]}
        if s is None:  # mean E_K of each training system's samples
            out[split]["E_K_per_system"] = [float(ek[systems == i].mean()) for i in range(len(train))]
        else:
            kernels[(name, split)] = K.numpy()  # every test sample's kernel
            out[split]["best_coefficients"] = _best_coefficients(model, s, su, sf)
            out[split] |= kernel_error_parts(K, s.kernel, m.weight[0], radial_density(su_).mean(0), m.pos[0, :, 0])
    return out


def kernel_error_parts(K, truth, weight, rho, r, near: float = 1.0) -> dict:
    """Where a split's E_K comes from, for the kernels ``K [S, N]`` its S samples (of one true
    kernel ``truth [N]``) give: the E_K of their mean kernel (bias), their spread about it
    relative to the truth (variance; the mean E_K^2 is about bias^2 + spread^2), and the share of
    the mean squared error from ``r < near``; all in L^2(rho) with the quadrature ``weight``."""
    w = weight * rho
    norm = (w * truth**2).sum()
    err2 = (w * (K - truth) ** 2).sum(0) / norm  # (N,) averaged below over the samples
    return {"E_K_of_mean_kernel": float(((w * (K.mean(0) - truth) ** 2).sum() / norm).sqrt()),
            "E_K_spread": float(((w * K.var(0, unbiased=False)).sum() / norm).sqrt()),
            f"E_K2_share_r_below_{near:g}": float(err2[r < near].sum() / err2.sum())}


def fit_adam_checkpointed(model, u, f, mesh, mesh_query, folder: Path | None = None, *, every: int = 100,
                          progress: bool = False, **settings) -> tuple[list[float], float]:
    """:func:`~geoattn.nao.fit_adam` keeping its run in ``folder/last.pt`` (every ``every`` epochs
    and after the last), from which a run cut off continues to the weights of an uninterrupted
    one. Returns the training E_f of every epoch and the training seconds, both over all sessions
    (epochs past the last checkpoint of a session cut off are trained again and not counted)."""
    last = None if folder is None else Path(folder) / "last.pt"
    tic = time.perf_counter()
    history = fit_adam(model, u, f, mesh, mesh_query, checkpoint=last, checkpoint_every=every,
                       progress=progress, **settings)
    if last is None:
        return history, time.perf_counter() - tic
    return history, float(torch.load(last, weights_only=True, map_location="cpu")["seconds"])


def _warm_start(args, model, folder: Path | None, u, f, s0, systems, score) -> dict | None:
    """With ``--warm-start MU``: the kernel layer solved by least squares (``fit_kernel_layer``,
    consistency ``MU``, ``W^{P,u}`` zeroed as in the least-squares runs) before Adam trains every
    parameter from there; its scores (``score()``) are kept in ``folder/warm_start.json``. A run
    resumed from its Adam checkpoint does not solve again."""
    if args.warm_start is None:
        return None
    saved = None if folder is None else Path(folder) / "warm_start.json"
    if saved is not None and (Path(folder) / "last.pt").exists():
        return json.loads(saved.read_text()) if saved.exists() else None
    model.mixer_u.zero_()
    tic = time.perf_counter()
    fit_kernel_layer(model, u, f, s0.mesh, s0.mesh_query, systems=systems, consistency=args.warm_start,
                     ridge=args.ridge, sweeps=args.sweeps, progress=True)
    scores = score() | {"seconds": time.perf_counter() - tic}
    log.info("warm start: %s", {k: v for k, v in scores.items() if k != "train"})
    if saved is not None:
        saved.parent.mkdir(parents=True, exist_ok=True)
        saved.write_text(json.dumps(scores))
    return scores


def radial_paper(args, prob, train, tests, u, f, systems, su, sf, results, kernels):
    """Table 1's NAO trained by Adam (:data:`RADIAL_PAPER`) in its run folder; its errors beside
    the paper's in ``results["NAO (Adam, L=2)"]`` and as a Markdown table."""
    name = f"NAO (Adam, L={args.layers})"
    config = {k: getattr(args, k) for k in ("dx", "d", "dk", "layers", "train_set", "epochs", "lr", "batch",
                                             "weight_decay", "step_size", "seed")}
    if args.warm_start is not None:  # (absent otherwise: the run folders of cold starts stay valid)
        config |= {"warm_start": args.warm_start, "sweeps": args.sweeps, "ridge": args.ridge}
        name = f"NAO (least squares mu={args.warm_start:g}, then Adam, L={args.layers})"
    if args.token_norm:  # (absent otherwise, likewise)
        config |= {"token_norm": True}
        name = name[:-1] + ", token norm)"
    if args.length_unit != 1.0:  # (absent otherwise, likewise)
        config |= {"length_unit": args.length_unit}
        name = name[:-1] + f", length unit {args.length_unit:g})"
    if args.dtype != "float64":  # (absent otherwise, likewise)
        config |= {"dtype": args.dtype}
        name = name[:-1] + f", {args.dtype})"
    runs = None if args.out is None else Path(args.out).with_name(Path(args.out).stem + "_runs")
    run = ModelRun(runs, f"radial-L{args.layers}", config)
    torch.manual_seed(args.seed)
    model = NAO(args.d, dim=1, head_channels=args.dk, layers=args.layers, coord_scale=prob.delta,
                token_norm=args.token_norm).double()
    s0 = train[0]
    done = run.result
    if done is not None:
        model.load_state_dict(torch.load(run.folder / "last.pt", weights_only=True, map_location="cpu")["model"])
        log.info("%s: finished in %s, skipped", name, run.folder)
        fresh = _score_radial(model, train, tests, u, f, systems, su, sf, kernels, name)  # the figure's kernels
        results[name] = fresh | done  # the saved scores, and those of splits added since (--test-dx)
        scores = {split: results[name][split] for split in ("train", *tests)}
    elif args.score_checkpoint:  # a run cut off, scored as it stands: neither trained nor finished
        last = None if run.folder is None else run.folder / "last.pt"
        if last is None or not last.exists():
            raise SystemExit(f"--score-checkpoint: no checkpoint {last} (give the run's --out)")
        state = torch.load(last, weights_only=True, map_location="cpu")
        model.load_state_dict(state["model"])
        history, seconds = list(state["history"]), float(state["seconds"])
        name = f"{name[:-1]}, epoch {len(history)} of {args.epochs})"
        scores = _score_radial(model, train, tests, u, f, systems, su, sf, kernels, name)
        results[name] = {"params": sum(p.numel() for p in model.parameters()), "epochs": len(history),
                         "train_seconds": seconds, "seconds": seconds, "train_E_f_last": history[-1],
                         "train_E_f": history, "unfinished": True,
                         "learning_rate_left": schedule_left(len(history), args)} | scores
    else:
        warm = _warm_start(args, model, run.folder, u / su, f / sf, s0, systems,
                           lambda: _score_radial(model, train, tests, u, f, systems, su, sf, kernels,
                                                 "least squares (warm start)"))
        # training only; scoring stays on the CPU in float64
        device, dtype = torch.device(args.device), getattr(torch, args.dtype)
        on = lambda m: TokenMesh(m.pos.to(device, dtype), m.weight.to(device, dtype))  # noqa: E731
        history, seconds = fit_adam_checkpointed(
            model.to(device, dtype), (u / su).to(device, dtype), (f / sf).to(device, dtype),
            on(s0.mesh), on(s0.mesh_query),
            run.folder, epochs=args.epochs, lr=args.lr, batch_size=args.batch, weight_decay=args.weight_decay,
            step_size=args.step_size, seed=args.seed, every=args.checkpoint_every, progress=True)
        model.to("cpu", torch.float64)
        tic = time.perf_counter()
        scores = _score_radial(model, train, tests, u, f, systems, su, sf, kernels, name)
        # the model's wall time: training over every session, and scoring
        results[name] = {"params": sum(p.numel() for p in model.parameters()), "epochs": len(history),
                         "train_seconds": seconds, "seconds": seconds + time.perf_counter() - tic,
                         "train_E_f_last": history[-1], "train_E_f": history,
                         "device": machine(torch.device(args.device))} | scores
        if warm is not None:
            results[name]["warm_start_scores"] = warm
        run.finish(results[name])
    seconds = results[name]["seconds"]
    history = results[name]["train_E_f"]
    device = f" ({results[name]['device']})" if "device" in results[name] else ""
    rows = ["| split | E_f (ours) | E_f (paper) | E_K (ours) | E_K (paper) |", "|---|---|---|---|---|"]
    for split in ("train", "ID", "OOD1", "OOD2"):
        paper = PAPER_RADIAL.get(split, {})
        cell = lambda v: "-" if v is None else f"{100 * v:.2f} %"  # noqa: E731
        rows.append(f"| {split} | {cell(scores[split]['E_f'])} | {cell(paper.get('E_f'))} "
                    f"| {cell(scores[split]['E_K'])} | {cell(paper.get('E_K'))} |")
    epochs = (f"{len(history)} of {args.epochs} epochs (cut off; the epochs left hold "
              f"{100 * results[name]['learning_rate_left']:.2g} % of the schedule's summed learning rate)"
              if results[name].get("unfinished") else f"{len(history)} epochs")
    table = (f"Radial kernel, {name} (d = {args.d}, d_k = {args.dk}, dx = {args.dx}, {epochs}, "
             f"learning rate {args.lr:g} x 0.9 every {args.step_size} epochs, "
             f"{results[name]['params']} parameters, wall time {seconds:.0f} s{device}; paper: Table 1, NAO with "
             "d = 302, d_k = 10, L = 2, 18843 parameters).\n\n"
             + "\n".join(rows))
    print(table)
    results[name]["table"] = table
    return model


def in_length_unit(s: RadialSamples, unit: float) -> RadialSamples:
    """The samples ``s`` with lengths measured in ``unit``: the r-grid's quadrature weights
    ``dr / unit`` and the kernel ``K * unit`` (so every Riemann sum, E_f and E_K are unchanged).
    The model's layers then sum with the smaller weights: the authors' code weights them with the
    spacing 2 / (N - 1) of [-1, 1], i.e. ``unit`` = delta / 2."""
    if unit == 1.0:
        return s
    return replace(s, mesh=TokenMesh(s.mesh.pos, s.mesh.weight / unit), kernel=s.kernel * unit)


def schedule_left(epoch: int, args) -> float:
    """The share of the step schedule's summed learning rate (``lr * 0.9 ** (e // step_size)`` over
    the epochs ``e``) left after ``epoch`` epochs: a bound on how far Adam, whose steps scale with
    the learning rate, can still move the weights, relative to how far the whole schedule can."""
    rates = args.lr * 0.9 ** (np.arange(args.epochs) // args.step_size)
    return float(rates[epoch:].sum() / rates.sum())


#: ``radial --scale cpu`` (the default): the least-squares kernel layer, L = 1, dx = 0.025
#: ``--loadings``: the paper's two loadings, or a diagnostic pair without the jump of
#: cos(x) 1_[-pi, pi] at +-pi (1 + cos x is continuous there, with its derivative).
RADIAL_LOADINGS = {"paper": LOADINGS,
                   "continuous": (lambda x: (1 + np.cos(x)) * (np.abs(x) <= np.pi), LOADINGS[1])}
RADIAL_CPU = {"dx": 0.025, "d": 302, "dk": 10, "layers": 1, "train_set": "sine", "epochs": 0,
              "lr": 3e-3, "batch": 10, "weight_decay": 1e-5, "step_size": 100, "token_norm": False}


def radial(args):
    if args.scale == "paper":
        for key, value in RADIAL_PAPER.items():
            if getattr(args, key) is None:
                setattr(args, key, value)
    for key, value in RADIAL_CPU.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    prob = RadialKernelProblem(dx=args.dx, loadings=RADIAL_LOADINGS[args.loadings])
    kernels_train = ([sine_kernel(eta) for eta in (1, 2, 3, 4, 6, 7, 8)] if args.train_set == "sine"
                     else diverse_kernels())
    train = [prob.samples(k, args.d) for k in kernels_train]
    tests = {"ID": prob.samples(sine_kernel(5.0), args.d), "OOD1": prob.samples(ood1_kernel, args.d),
             "OOD2": prob.samples(gaussian_kernel, args.d)}
    unit = lambda s: in_length_unit(s, args.length_unit)  # noqa: E731
    train, tests = [unit(s) for s in train], {k: unit(s) for k, s in tests.items()}
    s0 = train[0]
    u = torch.cat([s.u for s in train])
    f = torch.cat([s.f for s in train])
    systems = torch.repeat_interleave(torch.arange(len(train)), len(s0.u))
    # one global scale per field, as the authors' Gaussian normaliser (no mean shift: the model
    # is linear in g[u]); the learned kernel is mapped back with f_scale / u_scale
    su, sf = float(u.std()), float(f.std())
    log.info("radial: %d training samples, N=%d r-tokens, d=%d, scales u %.3g f %.3g",
             len(u), u.shape[1], args.d, su, sf)
    results = {"setting": vars(args), "train_samples": len(u), "tokens": u.shape[1],
               "baselines": radial_baselines(train, tests)}
    if args.test_dx:  # the trained model on the test kernels at another resolution
        other = RadialKernelProblem(dx=args.test_dx, x_spacing=prob.x_spacing, loadings=prob.loadings)  # same features
        for split, kern in (("ID", sine_kernel(5.0)), ("OOD1", ood1_kernel),
                            ("OOD2", gaussian_kernel)):
            tests[f"{split} at dx={args.test_dx:g}"] = unit(other.samples(kern, args.d))
    kernels = {}
    if args.scale == "paper":
        radial_paper(args, prob, train, tests, u, f, systems, su, sf, results, kernels)
    for mu in args.consistency if args.scale != "paper" else ():
        name = f"NAO (consistency {mu:g})"
        torch.manual_seed(0)
        model = NAO(args.d, dim=1, head_channels=args.dk, layers=args.layers,
                    coord_scale=prob.delta, token_norm=args.token_norm).double()
        # the f-token carries the system; an untrained random W^{P,u} would only add a
        # resolution-dependent quadrature of the loadings to the queries
        model.mixer_u.zero_()
        start = time.time()
        fit = fit_kernel_layer(model, u / su, f / sf, s0.mesh, s0.mesh_query, systems=systems,
                               consistency=mu, ridge=args.ridge, sweeps=args.sweeps, progress=True)
        results[name] = {"params": sum(p.numel() for p in model.parameters()),
                         "seconds": time.time() - start, "objective": fit.history}
        results[name] |= _score_radial(model, train, tests, u, f, systems, su, sf, kernels, name)
        log.info("%s: %s", name, {k: v for k, v in results[name].items() if k != "objective"})
    if args.figures:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, axes = plt.subplots(1, 3, figsize=(12, 3))
        r = s0.mesh.pos[0, :, 0].numpy()
        for ax, split in zip(axes, ("ID", "OOD1", "OOD2")):
            ax.plot(r, tests[split].kernel.numpy(), "k-", label="true", lw=2)
            names = list(dict.fromkeys(name for name, _ in kernels))
            for (name, sp), K in kernels.items():
                if sp == split:  # one colour per model, one thin line per sample
                    colour = f"C{names.index(name) % 10}"
                    ax.plot(r, K.T, color=colour, lw=0.6, alpha=0.6)
                    ax.plot([], [], color=colour, label=f"{name}, {len(K)} samples")
            ax.set_xlim(0, 2.5)
            ax.set_title(f"{split} kernels, each from one sample's {args.d} pairs", fontsize=9)
            ax.set_xlabel("r")
        fig.legend(*axes[0].get_legend_handles_labels(), loc="lower center", ncol=3, fontsize=7)
        fig.suptitle(f"{args.loadings} loadings", fontsize=9)
        fig.tight_layout(rect=(0, 0.1, 1, 1))
        fig.savefig(f"{args.figures}/nao_radial_kernels.png", dpi=80)
    return results


def darcy_bilinear_baseline(u, f, tests, weight, ridge=1e-4):
    r"""The best prediction of the form :math:`\tilde f = [F, 1]\, Z\, [U, 1]^\top
    \mathrm{diag}(w)\, g` with one full-rank :math:`Z` for all systems (least squares, ridge
    relative to the mean diagonal): a kernel layer with an identity mixer :math:`W^{P,f}` and no
    rank limit, i.e. more than NAO with L = 1 can express. Returns E_f on the training systems
    and on ``tests = (u, f)``."""
    def parts(u, f):
        ones = u.new_ones(*u.shape[:2], 1)
        return (torch.cat([f, ones], 2),
                torch.einsum("bnm,n,bnj->bmj", torch.cat([u, ones], 2), weight, u))

    u, f = u.double(), f.double()
    F, M = parts(u, f)
    c = 1 / torch.einsum("n,bnj->b", weight, f * f)
    H, rhs = normal_equations(F, M, f, weight.expand(len(u), -1), c)
    H.diagonal().add_(ridge * H.diagonal().mean())
    Z = torch.linalg.solve(H, rhs).reshape(F.shape[2], -1)
    tu, tf = (t.double() for t in tests)
    Ft, Mt = parts(tu, tf)
    return {"train": float(operator_error(F @ Z @ M, f, weight[None]).mean()),
            "test": float(operator_error(Ft @ Z @ Mt, tf, weight[None]).mean())}


def darcy(args):
    meshes = {"train": families.unit_square(args.n, kind="irregular", seed=1)}
    meshes["refined"] = families.refine(meshes["train"], 1)
    meshes["graded"] = families.unit_square(args.n, kind="graded")
    tasks = range(args.tasks + args.test_tasks)
    sources = GaussianRandomField(alpha=args.source_alpha, tau=args.source_tau)
    data = {k: microstructure_tasks(m, tasks, args.sources, seed=args.seed, source_field=sources)
            for k, m in meshes.items()}
    geo = {k: from_meshio(m, dtype=torch.float32) for k, m in meshes.items()}
    tr = data["train"][:args.tasks]
    gs = float(np.std(np.concatenate([t.g for t in tr])))
    ps = float(np.std(np.concatenate([t.p for t in tr])))
    rng = np.random.default_rng(args.seed)

    def systems(task_list, perms):
        u, f = [], []
        for t in task_list:
            for _ in range(perms):
                idx = rng.permutation(args.sources)[:args.d]
                u.append(torch.as_tensor(t.g[:, idx] / gs, dtype=torch.float32))
                f.append(torch.as_tensor(t.p[:, idx] / ps, dtype=torch.float32))
        return torch.stack(u), torch.stack(f)  # (len(task_list) * perms, N, d) each

    def mesh_of(k):  # the f-mesh is the u-mesh
        return TokenMesh.of(geo[k].pos, geo[k].weight)

    u, f = systems(tr, args.perms)
    # in-context E_f asks the kernel map to undo the Gram matrix of the system's own sources
    w0 = geo["train"].weight.double()
    gram = torch.linalg.eigvalsh(torch.einsum("bnj,n,bnk->bjk", u.double(), w0, u.double()))
    cond = float((gram[:, -1] / gram[:, 0]).median())
    log.info("darcy: %d training systems of d=%d on %d nodes, median Gram condition number %.3g",
             len(u), args.d, u.shape[1], cond)
    torch.manual_seed(0)
    model = NAO(args.d, dim=2, head_channels=args.dk, layers=args.layers)
    history = []
    if args.epochs > 0:  # the authors' recipe, global-RNG shuffles (seeded above)
        start = time.time()
        history = fit_adam(model, u, f, mesh_of("train"), epochs=args.epochs, lr=args.lr,
                           batch_size=args.batch, weight_decay=1e-6, clip=1.0, step_size=100,
                           gamma=0.9, seconds=args.seconds)
        for epoch in range(0, len(history), max(1, args.epochs // 10)):
            log.info("epoch %d train E_f %.4f", epoch, history[epoch])
        log.info("Adam: %d epochs in %.0f s, train E_f %.4f", len(history), time.time() - start,
                 history[-1])
    if args.sweeps > 0:  # least-squares kernel layer; systems = microstructures
        fit_kernel_layer(model, u, f, mesh_of("train"), consistency=args.consistency,
                         systems=torch.arange(len(tr)).repeat_interleave(args.perms),
                         ridge=1e-6, sweeps=args.sweeps, progress=True)
    results = {"setting": vars(args), "params": sum(p.numel() for p in model.parameters()),
               "train_systems": len(u), "gram_condition": cond, "adam_train_E_f": history}
    with torch.no_grad():
        for k in meshes:
            tu, tf = systems(data[k][args.tasks:], 2)
            mesh = mesh_of(k)
            pred = model.forward_dense(tu, tf, mesh)
            results[k] = {"nodes": tu.shape[1],
                          "E_f": float(operator_error(pred, tf, mesh.weight).mean())}
            log.info("%s mesh (%d nodes): E_f %.4f", k, tu.shape[1], results[k]["E_f"])
            if k == "train":
                results["bilinear_baseline"] = {
                    lam: darcy_bilinear_baseline(u, f, (tu, tf), w0, lam) for lam in (1e-8, 1e-4, 1e-2, 1e-1, 1.0)}
                log.info("full-rank bilinear form, E_f per ridge: %s", results["bilinear_baseline"])
        # kernel of the first test microstructure on the training mesh, vs the Green's kernel
        t = data["train"][args.tasks]
        tu, tf = systems([t], 1)
        K = model.kernel_dense(tu, tf, mesh_of("train"))[0].double() * (ps / gs)
        G = green_kernel(meshes["train"], PiecewiseConstant(preset("cao").sample(args.seed, args.tasks)))
        G1 = green_kernel(meshes["train"], 1.0)
        w = geo["train"].weight.double()
        results["E_K"] = float(kernel_error(K[None], G[None], w[None], w[None])[0])
        pos = geo["train"].pos.double()
        inner = (torch.minimum(pos, 1 - pos).min(1).values > 0.15).double() * w
        truth = torch.as_tensor(t.conductivity > np.sqrt(12 * 3))
        for name, kern in (("learned", K), ("green", G)):
            high, ratio = recover_microstructure(kern, G1, w)
            results[f"recovery_{name}"] = float((inner * (high == truth)).sum() / inner.sum())
        log.info("E_K %.3f, microstructure recovery (interior, weighted): learned %.3f, Green %.3f",
                 results["E_K"], results["recovery_learned"], results["recovery_green"])
        if args.figures:
            _darcy_figure(args.figures, meshes["train"], K, G, t.conductivity,
                          recover_microstructure(K, G1, w)[1])
    return results, model


def _darcy_figure(folder, mesh, K, G, conductivity, ratio):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.tri import Triangulation
    tri = Triangulation(mesh.points[:, 0], mesh.points[:, 1], mesh.cells_dict["triangle"])
    fig, axes = plt.subplots(1, 4, figsize=(13, 3))
    lim = float(G.abs().max())
    for ax, M, title in ((axes[0], G, "Green's kernel"), (axes[1], K, "NAO kernel")):
        ax.imshow(M.numpy(), cmap="RdBu_r", vmin=-lim, vmax=lim)
        ax.set_title(title)
    axes[2].tripcolor(tri, conductivity, cmap="viridis")
    axes[2].set_title("microstructure")
    axes[3].tripcolor(tri, (1 / ratio.clamp_min(1e-3)).numpy(), cmap="viridis", vmin=0, vmax=15)
    axes[3].set_title("1 / kernel row-sum ratio")
    for ax in axes[2:]:
        ax.set_aspect("equal")
    fig.tight_layout()
    fig.savefig(f"{folder}/nao_darcy_kernel.png", dpi=70)


def docs_table(problem: str, results: dict) -> str:
    """The results of a run as the table of its ``--docs`` page: radial, E_f and E_K per model and
    split (and Table 1's); darcy, E_f per mesh."""
    percent = lambda v: f"{100 * v:.3g} %"  # noqa: E731
    if problem == "radial":
        rows = [(name, split, percent(e["E_f"]), percent(e["E_K"]))
                for name, r in results.items() if name.startswith("NAO")
                for split, e in r.items() if isinstance(e, dict) and "E_f" in e]
        rows += [(f"{name}: after the least squares, before Adam", split, percent(e["E_f"]), percent(e["E_K"]))
                 for name, r in results.items() if name.startswith("NAO") and "warm_start_scores" in r
                 for split, e in r["warm_start_scores"].items() if isinstance(e, dict) and "E_f" in e]
        rows += [("paper, NAO (Table 1)", split, percent(e["E_f"]), percent(e["E_K"]))
                 for split, e in PAPER_RADIAL.items()]
        parts = [(name, split, percent(e["E_K"]), percent(e["E_K_of_mean_kernel"]), percent(e["E_K_spread"]),
                  f"{e['E_K2_share_r_below_1']:.2f}")
                 for name, r in results.items() if name.startswith("NAO")
                 for split, e in r.items() if isinstance(e, dict) and "E_K_spread" in e]
        table = markdown_table(["model", "split", "E_f", "E_K"], rows)
        if parts:
            table += ("\n\nWhere E_K comes from (each test split holds several samples of one kernel, each of d pairs; "
                      "mean E_K^2 is about bias^2 + spread^2):\n\n"
                      + markdown_table(["model", "split", "E_K (mean over samples)", "E_K of the mean kernel (bias)",
                                        "spread of the samples' kernels", "share of the error from r < 1"], parts))
        return table
    rows = [(mesh, results[mesh]["nodes"], percent(results[mesh]["E_f"])) for mesh in ("train", "refined", "graded")]
    table = markdown_table(["mesh", "nodes", "E_f"], rows)
    return table + f"\n\nE_K {percent(results['E_K'])}; {results['params']} parameters."


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__)
    sub = parser.add_subparsers(dest="problem", required=True)
    p = sub.add_parser("radial")
    p.add_argument("--scale", choices=("cpu", "paper"), default="cpu",
                   help="cpu: least-squares kernel layers (L = 1, dx = 0.025); paper: Table 1's L = 2 "
                        "model trained by Adam (RADIAL_PAPER); the options below override either")
    p.add_argument("--dx", type=float)
    p.add_argument("--d", type=int)
    p.add_argument("--dk", type=int)
    p.add_argument("--layers", type=int)
    p.add_argument("--train-set", choices=("sine", "diverse"),
                   help="the paper's seven sine kernels or its 21 diverse kernels (Table 2)")
    p.add_argument("--epochs", type=int, help="--scale paper: Adam epochs")
    p.add_argument("--lr", type=float, help="--scale paper: initial learning rate")
    p.add_argument("--batch", type=int, help="--scale paper: systems per step")
    p.add_argument("--weight-decay", type=float, help="--scale paper: Adam's L2 penalty")
    p.add_argument("--step-size", type=int,
                   help="--scale paper: epochs between the learning rate's steps by 0.9 (the paper's 100; with "
                        "fewer --epochs, --step-size epochs * 100 / 20000 keeps the schedule's shape)")
    p.add_argument("--seed", type=int, default=0, help="--scale paper: initialisation and shuffles")
    p.add_argument("--checkpoint-every", type=int, default=100,
                   help="--scale paper: epochs between checkpoints (and after the last); with --out a rerun "
                        "resumes from the last one")
    p.add_argument("--device", default="cpu",
                   help="--scale paper: where Adam trains (e.g. cuda); a run cut off may resume on another "
                        "device; scoring runs on the CPU (default: cpu)")
    p.add_argument("--length-unit", type=float, default=1.0,
                   help="measure lengths in this unit: the layers' quadrature weights become dr / unit "
                        "(the authors' code: 2 / (N - 1), i.e. unit = delta / 2 = 5.5)")
    p.add_argument("--dtype", choices=("float64", "float32"), default="float64",
                   help="--scale paper: the precision of training (scoring is in float64); float32 "
                        "is about 2.5x faster on a CPU")
    p.add_argument("--token-norm", action=argparse.BooleanOptionalAction,
                   help="normalise the hidden layers' updates as the authors' radial code (NAO(token_norm=True); "
                        "default: on with --scale paper, off with --scale cpu)")
    p.add_argument("--score-checkpoint", action="store_true",
                   help="--scale paper: score the run's last checkpoint as it stands (a run cut off), "
                        "without training or finishing it")
    p.add_argument("--loadings", choices=tuple(RADIAL_LOADINGS), default="paper",
                   help="paper: cos(x) and sin(2x) cut off outside [-pi, pi]; continuous: 1 + cos(x) for the "
                        "first, which has no jump at +-pi (a diagnostic of the kernels' steps)")
    p.add_argument("--sweeps", type=int, default=24, help="least-squares sweeps")
    p.add_argument("--warm-start", type=float, default=None, metavar="MU",
                   help="--scale paper: solve the kernel layer by least squares (consistency MU) before "
                        "Adam trains every parameter from there (default: Adam from the initialisation)")
    p.add_argument("--ridge", type=float, default=1e-6)
    p.add_argument("--test-dx", type=float, default=None,
                   help="also evaluate the trained models at this resolution")
    p.add_argument("--consistency", type=float, nargs="+", default=[0.0, 1.0],
                   help="weights of the kernel-consistency term, one model each")
    q = sub.add_parser("darcy")
    q.add_argument("--n", type=int, default=16)
    q.add_argument("--tasks", type=int, default=30)
    q.add_argument("--test-tasks", type=int, default=5)
    q.add_argument("--sources", type=int, default=60)
    q.add_argument("--d", type=int, default=50)
    q.add_argument("--dk", type=int, default=40)
    q.add_argument("--perms", type=int, default=10)
    q.add_argument("--epochs", type=int, default=200)
    q.add_argument("--lr", type=float, default=3e-3)
    q.add_argument("--batch", type=int, default=20)
    q.add_argument("--seconds", type=float, default=150)
    q.add_argument("--seed", type=int, default=0)
    q.add_argument("--layers", type=int, default=2)
    q.add_argument("--source-alpha", type=float, default=2.0, help="GRF of the sources")
    q.add_argument("--source-tau", type=float, default=3.0)
    q.add_argument("--sweeps", type=int, default=0,
                   help="least-squares sweeps of the kernel layer after Adam")
    q.add_argument("--consistency", type=float, default=1.0)
    for s in (p, q):
        s.add_argument("--out", default=None)
        s.add_argument("--figures", default=None)
        add_docs_argument(s)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    load_start = os.getloadavg()
    results = radial(args) if args.problem == "radial" else darcy(args)[0]
    if args.out:
        with open(args.out, "w") as fh:
            json.dump(results, fh, indent=1, default=str)
    if args.docs:
        table = docs_table(args.problem, results)
        print(table)
        write_page(args.docs, "Nonlocal Attention Operator (`benchmarks/nao.py`)",
                   " ".join(["python", "benchmarks/nao.py", *(sys.argv[1:] if argv is None else argv)]), table,
                   f"{machine(torch.device('cpu'))}, load average (1 min) {load_start[0]:.1f}–"
                   f"{os.getloadavg()[0]:.1f}; recorded {time.strftime('%Y-%m-%d')}")
    return results


if __name__ == "__main__":
    main()
