"""The widened Darcy race: the multigrid against FNO through a grid, tuned on a validation split,
on every family of domains, both coefficient laws and two seeds, so that a lead has to be broad.

    python benchmarks/widened_race.py --seconds 300 --tune-peer 120 --out bench_out/widened --docs docs/results/widened_race.md

Families (``--domains``), each at the ``race`` scale (200 training and 50 test samples, the
multigrid trained on the samples carried to the training mesh refined once, FNO on the nodes):

- ``square``: the unit square's 1 089-node irregular training mesh; scored on its refinement, a
  graded mesh and a foreign irregular mesh;
- ``square_holes``: the unit square without two discs, about 1 000 nodes; refined, graded at the
  holes, another mesher's;
- ``pores``: the unit square without 14 small pores (below one cell of FNO's grid), about 1 800
  nodes graded at the pores; refined, graded toward one side, another mesher's;
- ``random_holes``: 1-3 holes of varying size and place, a domain and mesh per sample; scored on 50
  new domains at the training size and on the same domains meshed 1.5 times finer;
- ``cube`` (3-D): the unit cube's jittered tetrahedral mesh with 13^3 = 2 197 nodes (``mesh_n``
  12); its refinement (15 625 nodes), a graded mesh and a jittered 19^3-node mesh. FNO runs on a
  13^3 grid, so its candidate modes are {4, 6} (at most half the grid).

Each law (``--families``: ``piecewise``, two-phase at contrast 4; ``threephase``, contrast 25)
is raced with every ``--seeds`` value for ``--seconds`` of measured training time per model
(or ``--epochs``). FNO is the best of its candidate modes x widths {32, 64} on the last fifth of
seed 0's training samples, each candidate trained ``--tune-peer`` seconds outside the race
(:func:`darcy.tuning.select_peer`). Runs are kept under ``OUT/<domain>/`` (a rerun skips them)
by :func:`geometry_input.run`; run one process per domain and law to use both cores, then the
same command rereads them all and writes the page.

With ``--reference-targets DOMAIN ...`` every model is also scored, on those fixed-mesh families,
against the solutions on the training mesh refined twice instead of each mesh's own P1 solutions:
a mesh's own targets carry its discretisation error, and a model fitted to the training mesh's
targets carries that mesh's error to every other mesh.

With ``--between-nodes LAMBDA`` the multigrid is also trained on the samples at the training
mesh's nodes with the between-nodes loss (:mod:`geoattn.train.between_nodes`: the nodal error
plus LAMBDA times the error at the once-refined mesh's new nodes, from one call) instead of on
the samples carried to the refined mesh: in 3-D refining once multiplies the nodes by about 7,
and the refined samples' step pays for all of them, while the between-nodes loss only reads the
output there.

With ``--equal-epochs`` the selected FNO is also trained for as many epochs as the multigrid made
in its time (the mean over the seeds), and the page compares the two at equal epochs.

The page gives every mesh's error (mean over the seeds), the ratio to FNO on each mesh, the
multigrid's worst ratio to its training-mesh error on the meshes the targets name (refined and
foreign, or finer), epochs, seconds per epoch and the load when each run ended, and checks the
two targets: at most 0.8x FNO on every mesh, at most 1.10x the training-mesh error.
"""

from __future__ import annotations

import argparse
import statistics
import time
from dataclasses import replace
from pathlib import Path

import torch

from darcy.race import SCALES
from geometry_input import PEER, budget, run, tuning_table, write_race_page
from results_page import add_docs_argument, markdown_table

MODEL = "multigrid"
#: Per family: the training mesh's size parameter (``None``: the scale's) and FNO's candidate modes.
FAMILIES = {"square": (None, (8, 12, 16)), "square_holes": (None, (8, 12, 16)), "pores": (None, (8, 12, 16)),
            "random_holes": (None, (8, 12, 16)), "cube": (12, (4, 6))}
#: The meshes the invariance target names (the others are reported, not scored against it).
SCORED = ("refined", "foreign", "finer")
TARGET_RATIO, TARGET_MOVE = 0.8, 1.10
#: Families whose test samples can also be scored against the twice-refined training mesh's solutions.
REFERENCE = ("square", "square_holes", "pores")


def ours(runs: list[dict]) -> list[str]:
    """The geoattn models among ``runs`` (every model but FNO), in order of appearance."""
    return [m for m in dict.fromkeys(r["model"] for r in runs) if m != PEER]


def summary(domain: str, runs: list[dict]) -> list[list]:
    """One row per law and geoattn model: its error ÷ FNO's on each mesh (means over the seeds),
    its worst ratio to its training-mesh error on the scored meshes, and whether both targets hold."""
    rows = []
    for family in dict.fromkeys(r["family"] for r in runs):
        peer = [r for r in runs if r["family"] == family and r["model"] == PEER]
        for model in ours(runs):
            mine = [r for r in runs if r["family"] == family and r["model"] == model]
            if not (mine and peer):
                continue
            meshes = list(mine[0]["test"])
            mean = {m: {k: statistics.fmean(r["test"][k] for r in rs) for k in meshes}
                    for m, rs in ((model, mine), (PEER, peer))}
            ratio = {k: mean[model][k] / mean[PEER][k] for k in meshes}
            move = max(mean[model][k] / mean[model]["train"] for k in meshes if k in SCORED)
            against = [r["reference"] for r in mine if "reference" in r]
            if against:  # the same ratio against the twice-refined training mesh's solutions
                ref = {k: statistics.fmean(a[k] for a in against) for k in meshes}
                continuum = f"{max(ref[k] / ref['train'] for k in meshes if k in SCORED):.2f}"
            else:
                continuum = "–"
            speed = (statistics.fmean(r["seconds_per_epoch"] for r in mine)
                     / statistics.fmean(r["seconds_per_epoch"] for r in peer))
            rows.append([domain, family, model,
                         " / ".join(f"{ratio[k]:.2f}" for k in meshes) + f" ({' / '.join(meshes)})",
                         "met" if max(ratio.values()) <= TARGET_RATIO else "missed", f"{move:.2f}",
                         "met" if move <= TARGET_MOVE else "missed", continuum, f"{speed:.2f}", len(mine)])
    return rows


def equal_epochs(domain: str, runs: list[dict], fno: list[dict]) -> list[list]:
    """One row per law: the multigrid's errors (its equal-time runs, ``E`` epochs on average) ÷
    those of FNO trained for ``E`` epochs (``fno``), each mesh's mean over the seeds FNO ran."""
    rows = []
    for family in dict.fromkeys(r["family"] for r in fno):
        peer = [r for r in fno if r["family"] == family]
        seeds = {r["seed"] for r in peer}  # each side the mean over the same seeds
        mg = [r for r in runs if r["family"] == family and r["model"] == MODEL and r["seed"] in seeds]
        meshes = list(mg[0]["test"])
        ratio = [statistics.fmean(r["test"][k] for r in mg) / statistics.fmean(r["test"][k] for r in peer)
                 for k in meshes]
        rows.append([domain, family, MODEL, " / ".join(str(r["epochs"]) for r in peer),
                     " / ".join(f"{q:.2f}" for q in ratio) + f" ({' / '.join(meshes)})",
                     "; ".join(f"{k} {statistics.fmean(r['test'][k] for r in peer):.4f}" for k in meshes),
                     len(peer)])
    return rows


def errors(domain: str, runs: list[dict]) -> list[list]:
    """One row per law and model: each mesh's error (mean [each seed's]), epochs, s / epoch, load."""
    rows = []
    for family in dict.fromkeys(r["family"] for r in runs):
        for m in (*ours(runs), PEER):
            rs = [r for r in runs if r["family"] == family and r["model"] == m]
            if not rs:
                continue
            best = rs[0].get("tuning", {}).get("best")
            label = f"FNO (modes {best['modes']}, width {best['width']})" if best else m
            cells = "; ".join(f"{k} {statistics.fmean(r['test'][k] for r in rs):.4f} ["
                              + " / ".join(f"{r['test'][k]:.4f}" for r in rs) + "]" for k in rs[0]["test"])
            rows.append([domain, family, label, cells, f"{statistics.fmean(r['epochs'] for r in rs):.0f}",
                         f"{statistics.fmean(r['seconds_per_epoch'] for r in rs):.1f}",
                         " / ".join(f"{r['load']:.1f}" for r in rs)])
            if all("reference" in r for r in rs):
                fine = "; ".join(f"{k} {statistics.fmean(r['reference'][k] for r in rs):.4f}" for k in rs[0]["test"])
                rows.append([domain, family, f"{label} against the fine solutions", fine, "", "", ""])
    return rows


def main(argv: list[str] | None = None) -> dict[str, list[dict]]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scale", default="race", choices=list(SCALES), help="the race's scale (default race)")
    parser.add_argument("--domains", nargs="+", default=list(FAMILIES), choices=list(FAMILIES))
    parser.add_argument("--families", nargs="+", default=["piecewise", "threephase"], help="coefficient laws")
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1])
    parser.add_argument("--epochs", type=int, help="epochs per model (equal epochs)")
    parser.add_argument("--seconds", type=float, help="training time per model (equal time)")
    parser.add_argument("--tune-peer", type=float, metavar="SECONDS", required=True,
                        help="each FNO candidate's training time on the validation split (not counted)")
    parser.add_argument("--tune-modes", nargs="+", type=int, help="FNO's candidate modes on every family "
                        "(default: {8, 12, 16}, on the cube {4, 6})")
    parser.add_argument("--tune-widths", nargs="+", type=int, default=[32, 64], help="FNO's candidate widths")
    parser.add_argument("--out", type=Path, required=True, help="folder of the runs, one subfolder per domain")
    parser.add_argument("--reference-targets", nargs="*", default=[], choices=REFERENCE, metavar="DOMAIN",
                        help="on these domains also score every model against the solutions on the training mesh "
                             "refined twice (the continuum's stand-in; not on the per-sample and 3-D families)")
    parser.add_argument("--between-nodes", type=float, metavar="LAMBDA",
                        help="also race the multigrid trained on the nodes with the between-nodes loss of weight "
                             "LAMBDA (Trainer(between_nodes=LAMBDA)) instead of on the refined samples; kept in "
                             "OUT/<domain>/between<LAMBDA>/")
    parser.add_argument("--equal-epochs", action="store_true",
                        help="also train the selected FNO for as many epochs as the multigrid made in its "
                             "budget (the mean over the seeds run), kept in OUT/<domain>/equal-epochs/")
    parser.add_argument("--kept-only", action="store_true",
                        help="train nothing: write the page from the runs kept under OUT (a run not made is left out)")
    add_docs_argument(parser)
    args = parser.parse_args(argv)
    if (args.epochs is None) == (args.seconds is None):
        parser.error("give --epochs or --seconds")
    torch.set_num_threads(1)
    tic = time.time()
    base = replace(SCALES[args.scale], epochs=args.epochs or 10**6, seconds=args.seconds)
    results, summaries, rows, tuning, matched = {}, [], [], [], []
    for domain in args.domains:
        mesh_n, modes = FAMILIES[domain]
        scale = replace(base, mesh_n=mesh_n or base.mesh_n) if args.scale != "tiny" else base
        runs = run(domain, args.families, args.seeds, [MODEL, PEER], args.out / domain, scale, args.tune_peer,
                   args.tune_modes or modes, args.tune_widths, reference=domain in args.reference_targets,
                   kept_only=args.kept_only)
        if args.between_nodes is not None:  # the multigrid trained on the nodes with the between-nodes loss
            lam = args.between_nodes
            variant = run(domain, args.families, args.seeds, [MODEL], args.out / domain / f"between{lam:g}",
                          replace(scale, refine_data=False, between_nodes=lam),
                          reference=domain in args.reference_targets, kept_only=args.kept_only)
            runs += [dict(r, model=f"{MODEL}, between-nodes λ={lam:g}") for r in variant]
        results[domain] = runs
        if args.equal_epochs:
            for family in args.families:
                mg = [r["epochs"] for r in runs if r["family"] == family and r["model"] == MODEL]
                if not mg:
                    continue
                epochs = round(statistics.fmean(mg))
                raced = next(r["tuning"] for r in runs if r["family"] == family and r["model"] == PEER)
                fno = run(domain, [family], args.seeds, [PEER], args.out / domain / "equal-epochs",
                          replace(scale, epochs=epochs, seconds=None), args.tune_peer, kept_only=args.kept_only,
                          selection={family: raced})  # the configuration that raced
                matched += equal_epochs(domain, runs, fno)
        summaries += summary(domain, runs)
        rows += errors(domain, runs)
        tuning.append(f"**{domain}**\n\n" + tuning_table(runs))
    text = (markdown_table(["family", "law", "model", "÷ FNO per mesh", f"≤ {TARGET_RATIO} everywhere",
                            "worst ÷ train (refined, foreign / finer)", f"≤ {TARGET_MOVE}",
                            "the same against the fine solutions", "s / epoch ÷ FNO's", "seeds"], summaries)
            + (("\n\n## At equal epochs: FNO trained for the multigrid's epochs\n\n" + markdown_table(
                ["family", "law", "model", "epochs", "÷ FNO per mesh", "FNO's errors", "seeds"], matched))
               if matched else "")
            + "\n\n## Errors (weighted relative L2, mean over the seeds [each seed's])\n\n"
            + markdown_table(["family", "law", "model", "test meshes", "epochs", "s / epoch", "load at the end"], rows)
            + "\n\n## FNO's candidates on the validation split\n\n" + "\n\n".join(tuning))
    print(text)
    if args.docs:
        write_race_page(args.docs, "widened_race", argv, "The widened Darcy race: the multigrid against a "
                        "tuned FNO on every family", text, tic,
                        f"Every model {budget(args)} ({'equal epochs' if args.epochs else 'measured training time'}) on "
                        "one thread (the load column: the 1-minute load when each seed's run ended). FNO's "
                        "selection time is not counted. Seconds per epoch differ across loads; compare the "
                        "ratio in one row.")
    return results


if __name__ == "__main__":
    main()
