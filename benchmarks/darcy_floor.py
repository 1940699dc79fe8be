"""What a mesh's nodes can tell: the Bayes error floor of every mesh of ``darcy_compare.py``.

    python benchmarks/darcy_floor.py --scale cpu --domain square --families lognormal piecewise

A model of ``darcy_compare.py`` reads the coefficient at the nodes of a mesh and is scored against
the continuum solution (``--reference-targets``: the solution on the training mesh refined twice).
The nodal values do not fix the continuum coefficient, so no model can be exact: the best
prediction in mean square is the conditional mean of the solution given what the nodes show,

    u*(nodes) = E[ u | a(x_1), ..., a(x_N) ],

the average of the solutions over the coefficients that agree with the nodes. Those are drawn from
the Gaussian random field conditioned on that information
(:mod:`problems.conditional`): its values for lognormal coefficients (exact Gaussian
conditioning), its signs for piecewise-constant ones (a Markov chain started at the test sample
itself, which is a draw of the same law: exact Hamiltonian Monte Carlo, whose draws are nearly
independent, or with ``--sampler slice`` elliptical slice sampling, which the first floors used). Each draw is solved on the reference mesh
and read at the mesh's nodes as the reference targets are.

The floor is the error of ``u*`` against each test sample, in the race's metric (weighted relative
L2 at the nodes, mean over the test samples; the RMS too). ``u*`` is estimated by the mean of
``M`` draws; since the test sample is itself a draw of the same conditional law,
``E|mean_M - u|^2 = (1 + 1/M) E|u* - u|^2`` for independent draws, and each squared error is
divided by ``1 + 1/M``. Two checks are printed beside it: the same estimate from the first half
of the draws, and the floor estimated from the draws' own spread (the conditional variance,
which does not involve the truth), with the correlation between consecutive draws. When the
chain's draws are not independent enough (a lag-1 correlation well above 0: the chain mixes
slowly where many nodes constrain the signs), or still remember the test sample they started
from, these disagree with the floor: correlated draws make the floor from the mean too high and
the one from the spread too low, and draws that remember the test sample make both too low (the
slice chain did on 1 089 nodes; the exact-HMC chain's draws are nearly independent).

A model trained on the data has to learn from 100 samples what ``u*`` computes from the prior
itself, so its error lies above the floor; a target below the floor is unreachable by any
predictor of the nodes (in mean square).
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

sys.path.insert(0, str(Path(__file__).resolve().parent))

from darcy.meshes import DOMAINS, benchmark_meshes, coefficient_field, fem_floor  # noqa: E402
from darcy.race import SCALES, Scale  # noqa: E402

from problems.conditional import SignConditionedField, ValueConditionedField  # noqa: E402
from geoattn.data.darcy import FAMILIES, DarcyProblem  # noqa: E402
from geoattn.mesh import families, from_meshio  # noqa: E402
from geoattn.mesh.interpolation import linear_interpolation  # noqa: E402
from geoattn.optional import progress  # noqa: E402
from results_page import add_docs_argument, write_page  # noqa: E402
from timing import machine  # noqa: E402

def corrected_errors(draws: np.ndarray, truth: np.ndarray, weight: np.ndarray) -> np.ndarray:
    """Relative weighted L2 errors of the mean of ``draws`` ``[M, N]`` against ``truth`` ``[N]``,
    as the error of the exact conditional mean: the squared error over ``1 + 1/M`` (exact in
    expectation when the draws and the truth are independent draws of one law)."""
    m = len(draws)
    squared = (weight * (draws.mean(0) - truth) ** 2).sum() / (1 + 1 / m)
    return np.sqrt(squared / (weight * truth**2).sum())


def spread_errors(draws: np.ndarray, truth: np.ndarray, weight: np.ndarray) -> np.ndarray:
    """The same floor from the spread of the draws alone: the expected squared error of the
    conditional mean is the conditional variance, estimated without bias by the draws' sample
    variance (the truth enters only as the norm). It does not depend on how the draws correlate
    with the truth, only on their own independence."""
    m = len(draws)
    variance = (weight * (draws - draws.mean(0)) ** 2).sum() / (m - 1)
    return np.sqrt(variance / (weight * truth**2).sum())


def lag_one_correlation(draws: np.ndarray) -> float:
    """Mean over the nodes of the correlation between consecutive draws ``[M, N]``: about 0 for
    independent draws, near 1 for a chain that moves little between them."""
    x = draws - draws.mean(0)
    var = (x**2).sum(0)
    keep = var > 1e-12 * var.max()  # boundary nodes have no spread
    return float(np.mean((x[1:] * x[:-1]).sum(0)[keep] / var[keep]))


SAMPLERS = {"hmc": (10, 1), "slice": (3000, 200)}  # the sign chains and their default (burn, thin)


def conditional_draws(field, family: str, truth, nodes: np.ndarray, rng: np.random.Generator,
                      draws: int, burn: int, thin: int, sampler: str = "hmc") -> list:
    """``draws`` fields that agree with what ``family``'s coefficient of ``truth`` shows at the nodes
    (``sampler``: the sign chain of a piecewise one, ``"hmc"`` or ``"slice"``)."""
    if family == "lognormal":
        cond = ValueConditionedField(field, nodes, truth(nodes))
        return [cond.sample(rng) for _ in range(draws)]
    if family == "piecewise":
        cond = SignConditionedField(field, nodes, truth)
        if sampler not in SAMPLERS:
            raise ValueError(f"unknown sampler {sampler!r}; choose one of {sorted(SAMPLERS)}")
        chain = cond.hmc if sampler == "hmc" else cond.chain
        return list(chain(rng, draws, burn=burn, thin=thin))
    raise ValueError(f"unknown family {family!r}; choose one of {sorted(FAMILIES)}")


def bayes_floor(scale: Scale, family: str, domain: str = "square", draws: int = 32, burn: int = 10,
                thin: int = 1, seed: int = 0, chain_seed: int = 0, show_progress: bool = True,
                only: list[str] | None = None, sampler: str = "hmc") -> dict:
    """The floor of every mesh (or of those in ``only``):
    ``{mesh: {"nodes", "mean", "se", "rms", "samples", "mean_half", "spread", "lag_one"}}``: the
    mean, its standard error, the RMS and the values over the test samples of
    :func:`corrected_errors`, the mean from the first half of the draws, the same summary of
    :func:`spread_errors` (a dict), and the mean :func:`lag_one_correlation`."""
    meshes = benchmark_meshes(scale.mesh_n, domain)
    unknown = set(only or ()) - set(meshes)
    if unknown:
        raise ValueError(f"meshes {sorted(unknown)} are not in the {domain} race; choose from {list(meshes)}")
    field = coefficient_field(meshes)
    reference = DarcyProblem(families.refine(meshes["train"], 2))
    ref_pos = torch.as_tensor(reference.nodes, dtype=torch.float64)
    bases = {name: from_meshio(m, dtype=torch.float64) for name, m in meshes.items()}
    read = {name: linear_interpolation(ref_pos, b.pos) for name, b in bases.items()}

    def solve(sample, name):
        u = torch.as_tensor(reference.solve(FAMILIES[family](sample)))[:, None]
        return read[name](u).numpy()[:, 0]

    rng = np.random.default_rng(chain_seed)
    errors = {name: [] for name in meshes}
    half = {name: [] for name in meshes}
    spread = {name: [] for name in meshes}
    lag = {name: [] for name in meshes}
    indices = range(scale.n_train, scale.n_train + scale.n_test)  # darcy_compare's test samples
    jobs = [(i, name) for i in indices for name in meshes if not only or name in only]
    for i, name in progress(jobs, enabled=show_progress, desc=f"{family} floor", unit="sample"):
        truth = field.sample(seed, i)
        nodes, weight = bases[name].pos.numpy(), bases[name].weight.numpy()
        u = solve(truth, name)
        sols = np.stack([solve(s, name) for s in conditional_draws(field, family, truth, nodes, rng,
                                                                   draws, burn, thin, sampler)])
        errors[name].append(float(corrected_errors(sols, u, weight)))
        half[name].append(float(corrected_errors(sols[: draws // 2], u, weight)))
        spread[name].append(float(spread_errors(sols, u, weight)))
        lag[name].append(lag_one_correlation(sols))
    def summary(values: list[float]) -> dict:
        v = np.asarray(values)
        return {"mean": float(v.mean()), "se": float(v.std(ddof=1) / np.sqrt(len(v))) if len(v) > 1 else float("nan"),
                "rms": float(np.sqrt(np.mean(v**2))), "samples": values}

    return {name: {"nodes": len(bases[name].pos), **summary(e), "mean_half": float(np.mean(half[name])),
                   "spread": summary(spread[name]), "lag_one": float(np.mean(lag[name]))}
            for name, e in errors.items() if e}


def transfer_bound(errors: dict[str, np.ndarray], floors: dict[str, np.ndarray], reference: str = "train",
                   resamples: int = 2000, seed: int = 0) -> dict:
    """What a model's transfer would be if it kept its excess over the floor.

    The conditional mean ``u*`` is the orthogonal projection of the solution on the functions of
    the nodes, so a predictor ``f`` of them has ``E|f - u|^2 = E|u* - u|^2 + E|f - u*|^2``: its
    squared error is the floor's plus its excess over ``u*``. ``errors`` and ``floors`` are the
    model's errors and the floor per mesh and test sample (the same samples in the same order).
    Per mesh: ``error`` (mean), ``rms`` (RMS), ``excess`` (RMS over the samples of the excess, ``sqrt(mean(e^2 -
    f^2))``, 0 where the floor is above the error), ``excess_ratio`` (over the reference mesh's
    excess), ``ratio`` (mean error over the reference mesh's) and ``kept`` (the ratio of a model
    whose every sample kept its reference-mesh excess: mean of ``sqrt(e_ref^2 - f_ref^2 + f^2)``
    over the reference mesh's mean error), with ``ratio_ci`` and ``kept_ci``, their 95 %
    bootstrap intervals over the test samples (``resamples`` draws of them with replacement). The squared errors are the race's relative ones, so the
    split holds approximately (the norm that divides them is the sample's own)."""
    if reference not in errors or reference not in floors:
        raise ValueError(f"the reference mesh {reference!r} needs the model's errors and the floor")
    e_ref, f_ref = np.asarray(errors[reference]), np.asarray(floors[reference])
    excess_ref = np.clip(e_ref**2 - f_ref**2, 0.0, None)
    boot = np.random.default_rng(seed).integers(0, len(e_ref), (resamples, len(e_ref)))

    def interval(numerator: np.ndarray) -> list[float]:  # of mean(numerator) / mean(e_ref)
        return np.percentile(numerator[boot].mean(1) / e_ref[boot].mean(1), [2.5, 97.5]).tolist()

    out = {}
    for name in [m for m in errors if m in floors]:
        e, f = np.asarray(errors[name]), np.asarray(floors[name])
        if e.shape != f.shape or e.shape != e_ref.shape:
            raise ValueError(f"mesh {name!r}: {e.size} model errors and {f.size} floor values, {e_ref.size} on "
                             f"{reference!r}: the same test samples are needed")
        excess = float(np.sqrt(np.clip(e**2 - f**2, 0.0, None).mean()))
        kept = np.sqrt(excess_ref + f**2)
        out[name] = {"error": float(e.mean()), "rms": float(np.sqrt((e**2).mean())), "excess": excess,
                     "excess_ratio": excess / float(np.sqrt(excess_ref.mean())),
                     "ratio": float(e.mean() / e_ref.mean()), "ratio_ci": interval(e),
                     "kept": float(kept.mean() / e_ref.mean()), "kept_ci": interval(kept)}
    return out


def transfer_table(results: Path, floors_file: Path, model: str, scores: str) -> str:
    """:func:`transfer_bound` of ``model``'s per-sample ``scores`` in a ``darcy_compare.py``
    results.json against both floor estimates of a floors.json, per family in both."""
    race = json.loads(Path(results).read_text())["results"]
    floors = json.loads(Path(floors_file).read_text())["floors"]
    lines = []
    for family in [f for f in floors if f in race]:
        models = race[family]["models"]
        if model not in models or scores not in models[model].get("samples", {}):
            raise ValueError(f"{results}: no per-sample {scores!r} of {model!r} for {family}")
        errors = models[model]["samples"][scores]
        rows = {kind: transfer_bound(errors, {m: (r if kind == "mean" else r["spread"])["samples"]
                                              for m, r in floors[family].items()})
                for kind in ("mean", "spread")}
        lines += [f"**{family}**, `{model}` ({scores}) against the floor (error of the mean / spread of the draws):",
                  "", "| mesh | error (RMS) | ratio to train (95 % interval) | RMS excess over the floor | "
                  "excess / train's | ratio if train's excess were kept (95 % intervals) |", "|---|---|---|---|---|---|"]
        for name, a in rows["mean"].items():
            b = rows["spread"][name]
            ci = "–".join(f"{v:.2f}" for v in a["ratio_ci"])
            kept_ci = " / ".join("–".join(f"{v:.2f}" for v in r["kept_ci"]) for r in (a, b))
            lines.append(f"| {name} | {a['error']:.4f} ({a['rms']:.4f}) | {a['ratio']:.2f} ({ci}) | "
                         f"{a['excess']:.4f} / {b['excess']:.4f} | {a['excess_ratio']:.2f} / {b['excess_ratio']:.2f} | "
                         f"{a['kept']:.2f} / {b['kept']:.2f} ({kept_ci}) |")
        lines.append("")
    return "\n".join(lines)


def table(floors: dict, fem: dict) -> str:
    lines = []
    for family, rows in floors.items():
        lines += [f"**{family}** coefficients, Bayes floor against the continuum (mean ± standard error "
                  f"over {len(next(iter(rows.values()))['samples'])} test samples, and RMS):", "",
                  "| mesh | nodes | floor: error of the mean | RMS | from half the draws | floor: spread of the draws "
                  "| RMS | lag-1 correlation of the draws | own targets' FEM error |",
                  "|---|---|---|---|---|---|---|---|---|"]
        for name, r in rows.items():
            b = r["spread"]
            lines.append(f"| {name} | {r['nodes']} | {r['mean']:.4f} ± {r['se']:.4f} | {r['rms']:.4f} | "
                         f"{r['mean_half']:.4f} | {b['mean']:.4f} ± {b['se']:.4f} | {b['rms']:.4f} | "
                         f"{r['lag_one']:.2f} | {fem[family][name]:.4f} |")
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scale", choices=sorted(SCALES), default="cpu")
    parser.add_argument("--domain", choices=DOMAINS, default="square")
    parser.add_argument("--families", nargs="+", choices=sorted(FAMILIES), default=["lognormal", "piecewise"])
    parser.add_argument("--mesh-n", type=int, default=None,
                        help="the training mesh's size, as darcy_compare.py's --mesh-n (default: the scale's)")
    parser.add_argument("--n-train", type=int, default=None,
                        help="training samples of the race: its test samples follow them (default: the scale's)")
    parser.add_argument("--n-test", type=int, default=None, help="test samples (default: the scale's)")
    parser.add_argument("--draws", type=int, default=32, help="conditional draws per sample and mesh (default 32)")
    parser.add_argument("--sampler", choices=sorted(SAMPLERS), default="hmc",
                        help="piecewise: the sign chain, exact Hamiltonian Monte Carlo (default) or elliptical "
                             "slice sampling")
    parser.add_argument("--burn", type=int, default=None,
                        help="piecewise: moves of the sign chain before its first draw (default 10 for hmc, "
                             "3000 for slice)")
    parser.add_argument("--thin", type=int, default=None,
                        help="piecewise: moves of the sign chain between draws (default 1 for hmc, 200 for slice)")
    parser.add_argument("--meshes", nargs="+", default=None, help="only these meshes of the race (default: all)")
    parser.add_argument("--out", type=Path, default=None, help="write floors.json and floors.md here")
    parser.add_argument("--transfer", nargs=2, type=Path, metavar=("FLOORS_JSON", "RESULTS_JSON"),
                        help="draw nothing: split a race's per-sample errors (darcy_compare.py --out) into the "
                             "floors.json's floor and the model's excess, and give the transfer ratio the model "
                             "would have if it kept its training-mesh excess on every mesh")
    parser.add_argument("--model", default="mesh_fno", help="with --transfer: the race's model (default mesh_fno)")
    parser.add_argument("--scores", default="test_reference",
                        help="with --transfer: which of its scores, e.g. test_reference_resolved_symmetrized "
                             "(default test_reference: against the continuum, as the floor)")
    add_docs_argument(parser)
    args = parser.parse_args(argv)
    command = " ".join(["python", "benchmarks/darcy_floor.py", *(sys.argv[1:] if argv is None else argv)])
    title = "Bayes floor of each mesh (`benchmarks/darcy_floor.py`)"
    if args.transfer:
        try:
            text = transfer_table(args.transfer[1], args.transfer[0], args.model, args.scores)
        except (OSError, ValueError, KeyError) as err:
            parser.error(f"--transfer: {err}")
        print(text)
        if args.docs:
            load = os.getloadavg()
            write_page(args.docs, title, command, text,
                       f"{machine(torch.device('cpu'))}, load average {load[0]:.1f} / {load[2]:.1f} (1 / 15 min); "
                       f"recorded {time.strftime('%Y-%m-%d')}")
        return {"transfer": text}
    if args.draws < 2:
        parser.error(f"--draws must be at least 2 (the check uses half of them), got {args.draws}")
    for name in ("mesh_n", "n_train", "n_test"):
        value = getattr(args, name)
        if value is not None and value < (0 if name == "n_train" else 1):
            parser.error(f"--{name.replace('_', '-')} must be {'non-negative' if name == 'n_train' else 'positive'}, "
                         f"got {value}")
    burn, thin = SAMPLERS[args.sampler]
    args.burn = burn if args.burn is None else args.burn
    args.thin = thin if args.thin is None else args.thin
    if args.burn < 0 or args.thin < 1:
        parser.error(f"need --burn >= 0 and --thin >= 1, got {args.burn} and {args.thin}")
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(message)s")
    scale = SCALES[args.scale]
    scale = replace(scale, **{k: v for k in ("mesh_n", "n_train", "n_test") if (v := getattr(args, k)) is not None})
    tic, cpu = time.perf_counter(), time.process_time()
    floors = {f: bayes_floor(scale, f, args.domain, args.draws, args.burn, args.thin, only=args.meshes,
                             sampler=args.sampler)
              for f in args.families}
    fem = {f: fem_floor(scale, f, args.domain) for f in args.families}
    text = table(floors, fem)
    load = os.getloadavg()
    if args.docs:
        write_page(args.docs, title, command, text,
                   f"{machine(torch.device('cpu'))}, load average {load[0]:.1f} / {load[2]:.1f} (1 / 15 min); "
                   f"recorded {time.strftime('%Y-%m-%d')}",
                   notes=f"Scale {args.scale} (training mesh n = {scale.mesh_n}, test samples {scale.n_train} to "
                         f"{scale.n_train + scale.n_test - 1}), domain {args.domain}, {args.draws} draws (sign chain: "
                         f"{args.sampler}, burn {args.burn}, thin {args.thin}); {time.perf_counter() - tic:.0f} s wall.")
    text += (f"\nscale {args.scale} (training mesh n = {scale.mesh_n}, test samples {scale.n_train} to "
             f"{scale.n_train + scale.n_test - 1}), domain {args.domain}, {args.draws} draws (sign chain: {args.sampler}, "
             f"burn {args.burn}, thin {args.thin}); {time.perf_counter() - tic:.0f} s wall, {time.process_time() - cpu:.0f} s CPU; "
             f"load average {load[0]:.1f} / {load[2]:.1f} (1 / 15 min)\n")
    print(text)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "floors.md").write_text(text)
        (args.out / "floors.json").write_text(json.dumps({"floors": floors, "fem_floor": fem,
                                                          "args": {k: str(v) for k, v in vars(args).items()}},
                                                         indent=1))
    return {"floors": floors, "fem_floor": fem}


if __name__ == "__main__":
    main()
