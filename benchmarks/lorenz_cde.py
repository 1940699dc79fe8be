"""Lorenz-63 and the controlled ODE with the Transformer Neural Operator on other time grids
(Calvello, Kovachki, Levine, Stuart, arXiv:2406.06486, §6.1, Figures 6-9).

    python benchmarks/lorenz_cde.py --experiment lorenz2 --scale cpu --out lorenz2.json --figure docs/images/lorenz_cde
    python benchmarks/lorenz_cde.py --experiment all --scale gpu --device cuda --out lorenz_cde_gpu.json

Experiments (``--experiment``, :data:`problems.odes.OPERATORS`):

- ``lorenz1``: :math:`\\{x(t), y(0), z(0)\\} \\mapsto \\{y(t), z(t)\\}` on Lorenz-63;
- ``lorenz2``: :math:`x(t) \\mapsto y(t)` on Lorenz-63 (the paper's non-uniform-grid experiment);
- ``cde``: :math:`u(t) \\mapsto z(t)` for :math:`dz = \\sin(z)\\,du`;
- ``all``: the three, one after the other.

For each, a TNO (:class:`geoattn.models.TNO`, ``dim=1``) is trained by
:class:`geoattn.train.Trainer` on the uniform grid :math:`\\Delta t = 0.01`, :math:`T = 2` (201
nodes, trapezoid weights), and the per-sample relative :math:`L^2(0, T)` error (weighted,
:func:`geoattn.train.relative_l2`) of held-out trajectories is reported, median and maximum, on

- the training grid;
- the paper's non-uniform grid, eq. (41): :math:`\\Delta t` on :math:`[0, 1]`, :math:`2\\Delta t`
  on :math:`[1, 2]` (151 nodes), never trained on;
- uniform grids of :math:`\\Delta t \\in \\{0.005, 0.0075, 0.015, 0.02\\}`, without retraining.

The ablation is the same model, same initialisation, same data and schedule, trained and
evaluated with node-average weights :math:`T / N` in its attention
(:class:`~geoattn.train.NormalizedOperator` with ``unweighted=True``): softmax attention that
counts nodes instead of integrating over time, the paper's "vanilla transformer" baseline
(Figure 9). The error metric is the same weighted :math:`L^2(0, T)` for both.

The test trajectories are the same continuum samples on every grid (each trajectory is solved
once, with dense output, and evaluated on each grid).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np
import torch

from timing import machine as describe_machine

from problems.odes import (DT, OPERATORS, TRANSFER_DTS, nonuniform_grid, ode_samples,
                           uniform_grid)
from geoattn.mesh import Mesh
from geoattn.models import TNO
from geoattn.optional import require
from geoattn.train import NormalizedOperator, evaluate_errors
from runs import ModelRun
from results_page import add_docs_argument, write_page

log = logging.getLogger("lorenz_cde")

EXPERIMENTS = tuple(OPERATORS)
#: the weighted TNO and its node-average ablation
MODELS = ("weighted", "node_average")

#: the project's target: the weighted model's non-uniform median error at most this times its
#: uniform (training-grid) median error
TARGET_RATIO = 1.25


@dataclass
class Scale:
    """Sizes of one run: trajectories, epochs, optimiser and the TNO's shape."""

    n_train: int
    n_test: int
    epochs: int
    batch_size: int
    lr: float
    width: int
    depth: int
    num_heads: int
    ff_mult: int
    seconds: float | None = None  # training-time budget per model (Trainer(seconds=)); None: all epochs


SCALES = {
    "tiny": Scale(n_train=4, n_test=2, epochs=1, batch_size=2, lr=1e-3, width=8, depth=1,
                  num_heads=2, ff_mult=1),
    # about 5 minutes per experiment with one CPU thread (data, two trainings, evaluation)
    "cpu": Scale(n_train=300, n_test=100, epochs=30, batch_size=8, lr=3e-3, width=32, depth=3,
                 num_heads=4, ff_mult=2),
    # the paper (§6.1, Figs. 6-9), for each of lorenz1, lorenz2 and cde: 8000 training and 1000 test
    # trajectories on T = 2, dt = 0.01, a TNO of d_model = 128 and 6 layers, FFN width d_model
    # (eq. 18). The paper gives no optimiser settings; from its code: 8 heads, batch 64, at most 100
    # epochs, learning rate 1e-3 (of {1e-3, 1e-4}). Ours: the Trainer's AdamW (weight decay 1e-4)
    # with a one-cycle schedule in place of the code's Adam with ReduceLROnPlateau, no dropout (code
    # 1e-4), the initial conditions and controls of problems.odes.
    "paper": Scale(n_train=8000, n_test=1000, epochs=100, batch_size=64, lr=1e-3, width=128, depth=6,
                   num_heads=8, ff_mult=1),
    # the paper preset in miniature, for the tests of resuming
    "paper-tiny": Scale(n_train=4, n_test=2, epochs=3, batch_size=2, lr=1e-3, width=8, depth=1,
                        num_heads=2, ff_mult=1),
}
SCALES["gpu"] = SCALES["paper"]  # the earlier name of the paper's setting

#: The paper's numbers (median, maximum relative L2), where its text gives them.
PAPER = {
    ("lorenz1", "uniform"): ("8.73e-03", "8.72e-02", "TNO, Fig. 6"),
    ("lorenz2", "node_average"): ("2.74e-02", "6.30e-02", "vanilla transformer, Fig. 9"),
}


def grids(dt: float = DT) -> dict[str, np.ndarray]:
    """The evaluation grids: the training grid, the non-uniform grid of eq. (41), the transfer steps."""
    out = {"uniform": uniform_grid(dt), "nonuniform": nonuniform_grid(dt)}
    out.update({f"dt={s:g}": uniform_grid(s) for s in TRANSFER_DTS})
    return out


def build(experiment: str, scale: Scale, unweighted: bool, seed: int) -> NormalizedOperator:
    """The TNO of ``experiment`` with its normalisers, initialised from ``seed``."""
    spec = OPERATORS[experiment]
    torch.manual_seed(seed)
    model = TNO(spec.in_channels, spec.out_channels, dim=1, width=scale.width, depth=scale.depth,
                num_heads=scale.num_heads, ff_mult=scale.ff_mult)
    return NormalizedOperator(model, unweighted=unweighted)


def summary(errors: torch.Tensor) -> dict[str, float]:
    """Median, maximum and mean of per-sample errors."""
    e = errors.double().cpu()
    return {"median": float(e.median()), "max": float(e.max()), "mean": float(e.mean())}  # quadrature-ok: over samples


@torch.no_grad()
def predict(op: NormalizedOperator, data) -> np.ndarray:
    op.eval()
    return op(data.x, Mesh(data.pos, data.weight)).cpu().numpy()


def run_experiment(experiment: str, scale: Scale, device: torch.device, seed: int = 0,
                   progress: bool = True, runs: Path | None = None,
                   models: tuple[str, ...] = MODELS) -> dict:
    """Train the weighted TNO and the node-average ablation on the uniform grid and score both on
    every grid of :func:`grids`. With ``runs``, each model trains in its own run folder
    ``runs/runs/<experiment>-<model>`` (:class:`runs.ModelRun`): a rerun continues a model cut off
    and skips the finished ones. ``models``: the subset to train now (two processes can train the
    two models side by side into the same ``runs``); the comparison needs both, so with one the
    result holds that model only."""
    tic = time.perf_counter()
    all_grids = grids()
    train = ode_samples(experiment, {"uniform": all_grids["uniform"]}, scale.n_train, seed,
                        progress=progress)["uniform"]
    test = ode_samples(experiment, all_grids, scale.n_test, seed, start=scale.n_train, progress=progress)
    data_seconds = time.perf_counter() - tic
    log.info("%s: %d + %d trajectories in %.1f s", experiment, scale.n_train, scale.n_test, data_seconds)
    train = [d.to(device) for d in train]
    test = {k: [d.to(device) for d in v] for k, v in test.items()}
    out = {"nodes": {k: len(t) for k, t in all_grids.items()}, "data_seconds": data_seconds, "models": {}}
    operators = {}
    for name in models:
        unweighted = name == "node_average"
        run = ModelRun(runs, f"{experiment}-{name}", {**asdict(scale), "experiment": experiment,
                                                      "model": name, "seed": seed})
        op = build(experiment, scale, unweighted, seed).to(device)
        if run.result is not None:
            run.restore(op)
            out["models"][name] = run.result
            log.info("%s %s: finished in %s, skipped", experiment, name, run.folder)
        else:
            history = run.fit(op, train, epochs=scale.epochs, batch_size=scale.batch_size, lr=scale.lr,
                              seed=seed, progress=progress, seconds=scale.seconds)
            tic_eval = time.perf_counter()
            errors = {g: summary(evaluate_errors(op, samples, batch_size=max(scale.batch_size, 32)))
                      for g, samples in test.items()}
            train_seconds = float(sum(h["seconds"] for h in history))  # every session of a resumed run
            eval_seconds = time.perf_counter() - tic_eval
            out["models"][name] = {
                "parameters": sum(p.numel() for p in op.parameters() if p.requires_grad),
                "train_seconds": train_seconds,
                "eval_seconds": eval_seconds,
                "seconds": train_seconds + eval_seconds,  # the model's wall time
                "train_error": history[-1]["train"],
                "epochs": len(history),
                "errors": errors,
            }
            run.finish(out["models"][name])
        errors = out["models"][name]["errors"]
        operators[name] = op
        log.info("%s %s: %s", experiment, name, {g: f"{e['median']:.3e}" for g, e in errors.items()})
    if set(models) != set(MODELS):
        out["seconds"] = time.perf_counter() - tic
        return out
    w = out["models"]["weighted"]["errors"]
    out["ratio"] = w["nonuniform"]["median"] / w["uniform"]["median"]
    out["target_met"] = bool(out["ratio"] <= TARGET_RATIO)
    out["ablation_ratio"] = (out["models"]["node_average"]["errors"]["nonuniform"]["median"]
                             / w["nonuniform"]["median"])
    # the median test sample on the non-uniform grid (the lower middle one for an even count, as
    # torch.median), for the figure
    errs = evaluate_errors(operators["weighted"], test["nonuniform"], batch_size=32).cpu()
    k = int(errs.argsort()[(len(errs) - 1) // 2])
    sample = test["nonuniform"][k]
    out["example"] = {"index": scale.n_train + k, "t": sample.pos[:, 0].cpu().tolist(),
                      "true": sample.y.cpu().numpy().tolist(),
                      **{name: predict(op, sample).tolist() for name, op in operators.items()}}
    out["seconds"] = time.perf_counter() - tic
    return out


def _fmt(e: dict) -> str:
    return f"{e['median']:.2e} | {e['max']:.2e}"


def markdown(experiment: str, res: dict, scale: Scale) -> str:
    """One Markdown table of an experiment: each evaluation grid, geoattn's median and maximum
    relative L2 error, and the paper's numbers where its text gives them."""
    w, a = res["models"]["weighted"]["errors"], res["models"]["node_average"]["errors"]
    nodes = res["nodes"]
    rows = [("geoattn TNO, uniform dt = 0.01 (training grid, held-out)", nodes["uniform"], w["uniform"],
             PAPER.get((experiment, "uniform"))),
            ("geoattn TNO, non-uniform eq. (41) (not trained on)", nodes["nonuniform"], w["nonuniform"],
             PAPER.get((experiment, "nonuniform")))]
    rows += [(f"geoattn TNO, uniform dt = {g[3:]} (not trained on)", nodes[g], w[g], None)
             for g in nodes if g.startswith("dt=")]
    rows.append(("node-average ablation, non-uniform eq. (41)", nodes["nonuniform"], a["nonuniform"],
                 PAPER.get((experiment, "node_average"))))
    rows.append(("node-average ablation, uniform dt = 0.01", nodes["uniform"], a["uniform"], None))
    epochs = {res["models"][m].get("epochs", scale.epochs) for m in MODELS}
    trained = f"{scale.epochs} epochs" if epochs == {scale.epochs} else (
        f"{' / '.join(str(res['models'][m].get('epochs')) for m in MODELS)} epochs (weighted / node-average) "
        f"in a training-time budget of {scale.seconds:.0f} s each")
    lines = [f"**{experiment}** ({scale.n_train} training / {scale.n_test} test trajectories, TNO width "
             f"{scale.width}, depth {scale.depth}, {trained}):", "",
             "| evaluation | nodes | median rel. L2 | max rel. L2 | paper (median / max) |",
             "|---|---|---|---|---|"]
    for label, n, e, paper in rows:
        ref = f"{paper[0]} / {paper[1]} ({paper[2]})" if paper else "plot only" if "ablation" not in label else "-"
        lines.append(f"| {label} | {n} | {_fmt(e)} | {ref} |")
    verdict = "met" if res["target_met"] else "missed"
    lines += ["", f"Non-uniform / uniform median: {res['ratio']:.2f} (target <= {TARGET_RATIO}: {verdict}); "
              f"node-average / weighted on the non-uniform grid: {res['ablation_ratio']:.2f}."]
    wall = {m: r.get("seconds", r["train_seconds"]) for m, r in res["models"].items()}
    lines.append(f"Wall time per model (training and scoring): weighted {wall['weighted']:.0f} s, "
                 f"node-average {wall['node_average']:.0f} s.")
    return "\n".join(lines)


def plot(experiment: str, res: dict, path: Path) -> Path:
    """Three panels: the median test sample on the non-uniform grid (truth, weighted TNO,
    node-average ablation), the pointwise error of both on it, and the median/maximum error
    against the time step."""
    matplotlib = require("matplotlib", "plot", "the figure")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    spec = OPERATORS[experiment]
    ex = res["example"]
    t, true = np.array(ex["t"]), np.array(ex["true"])
    fig, (left, middle, right) = plt.subplots(1, 3, figsize=(14, 3.6))
    for c, name in enumerate(spec.targets):
        left.plot(t, true[:, c], "k-", lw=1.2, label="true" if c == 0 else None)
        left.plot(t, np.array(ex["weighted"])[:, c], "C0--", lw=1.2, label="TNO (weighted)" if c == 0 else None)
        left.plot(t, np.array(ex["node_average"])[:, c], "C3:", lw=1.2,
                  label="node-average ablation" if c == 0 else None)
    left.axvspan(t[-1] / 2, t[-1], color="0.92", zorder=0)
    left.set_xlabel("t (shaded: step 2 dt)")
    left.set_title(f"{experiment}: {', '.join(n + '(t)' for n in spec.targets)} of the median test sample, "
                   "non-uniform grid", fontsize=8)
    left.legend(fontsize=7)
    for name, color in (("weighted", "C0"), ("node_average", "C3")):
        gap = np.linalg.norm(np.array(ex[name]) - true, axis=1)
        middle.semilogy(t, gap, color=color, lw=1, label="TNO (weighted)" if name == "weighted" else "node-average")
    middle.axvspan(t[-1] / 2, t[-1], color="0.92", zorder=0)
    middle.set_xlabel("t (shaded: step 2 dt)")
    middle.set_title("pointwise error of the same sample", fontsize=8)
    middle.legend(fontsize=7)
    errs = {m: res["models"][m]["errors"] for m in ("weighted", "node_average")}
    steps = sorted([(DT, "uniform")] + [(float(g[3:]), g) for g in errs["weighted"] if g.startswith("dt=")])
    x = [s for s, _ in steps]
    for m, color in (("weighted", "C0"), ("node_average", "C3")):
        label = "TNO (weighted)" if m == "weighted" else "node-average"
        right.plot(x, [errs[m][g]["median"] for _, g in steps], "o-", color=color, label=f"{label}: median")
        right.plot(x, [errs[m][g]["max"] for _, g in steps], "o:", color=color, ms=3, label=f"{label}: max")
        right.plot([DT], [errs[m]["nonuniform"]["median"]], "*", color=color, ms=12, mec="k", mew=0.5,
                   label=f"{label}: non-uniform (41), median")
    right.set_xscale("log")
    right.set_yscale("log")
    right.set_xticks(x, [f"{s:g}" for s in x], fontsize=7)
    right.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
    right.set_xlabel("dt of the uniform test grid (trained at 0.01)")
    right.set_ylabel("test relative L2 error")
    right.set_title("error against the time step", fontsize=8)
    right.legend(fontsize=6, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=80, bbox_inches="tight")
    plt.close(fig)
    return path


def replot(path: Path, figure: Path | None = None) -> dict:
    """The tables (and, with a ``figure`` prefix, the figures) of a results file written by ``--out``."""
    run = json.loads(Path(path).read_text())
    scale = Scale(**run["scale"])
    for experiment, res in run["results"].items():
        print(markdown(experiment, res, scale) + "\n")
        if figure:
            print(f"figure: {plot(experiment, res, Path(f'{figure}_{experiment}.png'))}")
    return run["results"]


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--experiment", default="all", choices=EXPERIMENTS + ("all",))
    parser.add_argument("--scale", default="cpu", choices=sorted(SCALES))
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu",
                        help="torch device (default: cuda if available, else cpu)")
    parser.add_argument("--seed", type=int, default=0, help="data stream and initialisation seed")
    for field in ("n_train", "n_test", "epochs", "batch_size", "width", "depth"):
        parser.add_argument("--" + field.replace("_", "-"), type=int, help=f"override the scale's {field}")
    parser.add_argument("--seconds", type=float,
                        help="training-time budget per model (the one-cycle schedule fits into it; "
                             "default: the scale's, none = all epochs)")
    parser.add_argument("--models", nargs="+", choices=MODELS, default=list(MODELS),
                        help="train only these now (with --out, two processes can train the two side by "
                             "side; the same command without --models then scores and tabulates both)")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1)")
    parser.add_argument("--out", type=Path,
                        help="JSON file of the results; each model also trains in its own run folder under "
                             "a folder beside it (r.json: r_runs/runs/lorenz1-weighted, ...): the same "
                             "command again resumes a run cut off and skips the finished models")
    parser.add_argument("--figure", type=Path,
                        help="figure prefix: writes PREFIX_<experiment>.png per experiment")
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")
    parser.add_argument("--replot", type=Path, metavar="JSON",
                        help="train nothing: print the tables of an earlier --out file (and its figures with --figure)")
    add_docs_argument(parser)
    args = parser.parse_args(argv)
    if args.replot:
        return replot(args.replot, args.figure)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(message)s")
    log.setLevel(logging.INFO)
    torch.set_num_threads(args.threads)
    scale = replace(SCALES[args.scale], **{k: v for k, v in vars(args).items()
                                           if k in Scale.__dataclass_fields__ and v is not None})
    device = torch.device(args.device)
    experiments = EXPERIMENTS if args.experiment == "all" else (args.experiment,)
    results, tables = {}, []
    for experiment in experiments:
        runs = None if args.out is None else args.out.with_name(args.out.stem + "_runs")
        results[experiment] = run_experiment(experiment, scale, device, args.seed, not args.no_progress, runs,
                                             tuple(args.models))
        if set(args.models) != set(MODELS):
            print(f"{experiment}: trained {', '.join(args.models)}; the same command without --models "
                  "tabulates both models")
            continue
        tables.append(markdown(experiment, results[experiment], scale))
        print(tables[-1])
        print(f"({results[experiment]['seconds']:.0f} s, of which data {results[experiment]['data_seconds']:.0f} s)\n")
        if args.figure:
            path = plot(experiment, results[experiment], Path(f"{args.figure}_{experiment}.png"))
            print(f"figure: {path}")
    machine = describe_machine(device)
    load = os.getloadavg()
    print(f"scale {args.scale}: {asdict(scale)}; seed {args.seed}; device {device} ({machine}); total "
          f"{sum(r['seconds'] for r in results.values()):.0f} s; load average at the end "
          f"{load[0]:.1f} / {load[2]:.1f} (1 / 15 min)")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"scale": asdict(scale), "scale_name": args.scale, "seed": args.seed,
                                        "device": str(device), "machine": machine, "load": load,
                                        "results": results}, indent=1))
    if args.docs and tables:
        write_page(args.docs, "Lorenz-63 and a controlled ODE, TNO in 1-D (`benchmarks/lorenz_cde.py`)",
                   " ".join(["python", "benchmarks/lorenz_cde.py", *(sys.argv[1:] if argv is None else argv)]),
                   "\n\n".join(tables),
                   f"device {device} ({machine}), load average at the end "
                   f"{load[0]:.1f} / {load[2]:.1f} (1 / 15 min); recorded {time.strftime('%Y-%m-%d')}",
                   notes=f"Scale {args.scale}, seed {args.seed}; total "
                         f"{sum(r['seconds'] for r in results.values()):.0f} s.")
    return results


if __name__ == "__main__":
    main()
