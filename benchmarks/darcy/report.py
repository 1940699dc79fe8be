"""The Darcy race's results: terminal table, markdown tables, figures, and runs merged."""

from __future__ import annotations

import json
from pathlib import Path

from .race import Scale


#: Scores besides the default one (each mesh's own targets), by result key, with their titles.
EXTRA_SCORES = {
    "test_reference": "against the twice-refined training mesh's solutions (`--reference-targets`)",
    "test_resolved": "each mesh refined to the training mesh's longest edge for the model, output "
                     "read at its own nodes (`--resolve-quadrature`)",
    "test_reference_resolved": "both (`--reference-targets --resolve-quadrature`)",
    "test_symmetrized": "averaged over the domain's symmetries (`--symmetries`)",
    "test_reference_symmetrized": "averaged over the domain's symmetries, against the twice-refined "
                                  "training mesh's solutions (`--symmetries --reference-targets`)",
    "test_resolved_symmetrized": "averaged over the domain's symmetries inside the refinement "
                                 "(`--symmetries --resolve-quadrature`)",
    "test_reference_resolved_symmetrized": "averaged over the domain's symmetries inside the refinement, "
                                           "against the twice-refined training mesh's solutions "
                                           "(`--symmetries --resolve-quadrature --reference-targets`)",
}


def markdown(results: dict, scale: Scale) -> str:
    """The results as a markdown table per family (model, cost, error on each mesh)."""
    out = []
    if scale.supersample > 1:
        out.append(f"geoattn's models compute on every mesh refined to the training mesh's longest edge / "
                   f"{scale.supersample} (`--supersample {scale.supersample}`); the other models see the nodes.\n")
    if scale.mix_resolution > 0:
        out.append(f"geoattn's models compute a share {scale.mix_resolution:g} of their training batches on the "
                   f"training mesh refined to half its longest edge (`--mix-resolution`); they are scored on the "
                   f"meshes as they are.\n")
    if scale.coarsen > 0:
        out.append(f"geoattn's models see a share {scale.coarsen:g} of their training inputs through a random "
                   f"subset of the nodes, interpolated back (`--coarsen`); they are scored on the inputs as they are.\n")
    if scale.symmetries:
        out.append("Every model trains on each training sample carried by the domain's symmetries "
                   "(`--symmetries`).\n")
    if scale.ensemble > 1:
        out.append(f"Every model is the mean of {scale.ensemble} members (`--ensemble {scale.ensemble}`), each "
                   f"trained for 1/{scale.ensemble} of the budget; epochs are each member's.\n")
    for family, res in results.items():
        meshes = list(res["nodes"])
        out.append(f"**{family}** coefficients (test relative L2(D) error, mean of {scale.n_test} samples):\n")
        head = ["model", "parameters", "epochs", "s / epoch", "train s", "CPU s / epoch", "peak MiB"] + [
            f"{m} ({res['nodes'][m]})" for m in meshes] + ["worst / train"]
        out.append("| " + " | ".join(head) + " |")
        out.append("|" + "---|" * len(head))
        for name, r in res["models"].items():
            errs = [r["test"][m] for m in meshes]
            epochs = r.get("epochs", scale.epochs)
            cells = [name, f"{r['parameters']:,}", f"{epochs}", f"{r['seconds_per_epoch']:.2f}",
                     f"{r.get('train_seconds', epochs * r['seconds_per_epoch']):.1f}",
                     f"{r['cpu_seconds_per_epoch']:.2f}", f"{r['peak_mib']:.0f}"]
            cells += [f"{e:.4f}" for e in errs] + [f"{max(errs[1:]) / errs[0]:.2f}"]
            out.append("| " + " | ".join(cells) + " |")
        out.append("")
        best = [f"{name} {', '.join(map(str, r.get('best_epochs', [r['best_epoch']])))} of {r['epochs']} "
                f"(validation error {', '.join(f'{e:.4f}' for e in r.get('val_errors', [r['val_error']]))})"
                for name, r in res["models"].items() if "best_epoch" in r]
        if best:
            out.append(f"Scored at the best epoch on {scale.validation} validation samples (`--validation`): "
                       + ", ".join(best) + ".\n")
        configs = [f"- `{name}`: `{r['config']}`" for name, r in res["models"].items() if "config" in r]
        if configs:
            out += ["Configurations:", "", *configs, ""]
        if res.get("failed"):
            out.append("Failed, left out: " + "; ".join(f"`{name}` ({why})" for name, why in res["failed"].items())
                       + ".\n")
        for key, title in EXTRA_SCORES.items():
            if not all(key in r for r in res["models"].values()):
                continue
            out.append(f"**{family}**, {title}:\n")
            head = ["model"] + [f"{m} ({res['nodes'][m]})" for m in meshes] + ["worst / train"]
            out += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
            for name, r in res["models"].items():
                errs = [r[key][m] for m in meshes]
                out.append("| " + " | ".join([name] + [f"{e:.4f}" for e in errs]
                                             + [f"{max(errs[1:]) / errs[0]:.2f}"]) + " |")
            out.append("")
    return "\n".join(out)


def table(results: dict) -> str:
    """Plain-text table for the terminal."""
    lines = []
    for family, res in results.items():
        meshes = list(res["nodes"])
        lines.append(f"{family}: " + ", ".join(f"{m} {n} nodes" for m, n in res["nodes"].items()))
        width = max(26, *(len(name) + 1 for name in res["models"]))
        lines.append(f"{'model':<{width}}{'params':>9}{'epochs':>7}{'s/epoch':>9}{'train s':>8}{'cpu s':>8}{'MiB':>7}"
                     + "".join(f"{m:>11}" for m in meshes) + f"{'worst/train':>12}")
        for name, r in res["models"].items():
            errs = [r["test"][m] for m in meshes]
            epochs = r.get("epochs", 0)
            lines.append(f"{name:<{width}}{r['parameters']:>9}{epochs:>7}{r['seconds_per_epoch']:>9.2f}"
                         f"{r.get('train_seconds', epochs * r['seconds_per_epoch']):>8.1f}"
                         f"{r['cpu_seconds_per_epoch']:>8.2f}{r['peak_mib']:>7.0f}"
                         + "".join(f"{e:>11.4f}" for e in errs) + f"{max(errs[1:]) / errs[0]:>12.2f}")
            for key in EXTRA_SCORES:
                if key in r:
                    extra = [r[key][m] for m in meshes]
                    label = "  " + key[len("test_"):].replace("_", ", ")
                    lines.append(f"{label:<{width}}{'':>48}" + "".join(f"{e:>11.4f}" for e in extra)
                                 + f"{max(extra[1:]) / extra[0]:>12.2f}")
            if "best_epochs" in r:
                lines.append(f"  the mean of {len(r['best_epochs'])} members, scored at epochs "
                             f"{', '.join(map(str, r['best_epochs']))} of {epochs}, their best on the validation samples "
                             f"({', '.join(f'{e:.4f}' for e in r['val_errors'])})")
            elif "best_epoch" in r:
                lines.append(f"  scored at epoch {r['best_epoch']} of {epochs}, its best on the validation "
                             f"samples ({r['val_error']:.4f})")
        lines += [f"{name:<{width}}failed: {why}" for name, why in res.get("failed", {}).items()]
        lines += [f"  {name}: {r['config']}" for name, r in res["models"].items() if "config" in r]
    return "\n".join(lines)


def plot(results: dict, folder: Path, prefix: str = "darcy_compare") -> list[Path]:
    """Error vs mesh (one line per model) and error on the training mesh vs seconds per epoch."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    folder.mkdir(parents=True, exist_ok=True)
    fams = list(results)
    paths = []
    fig, axes = plt.subplots(1, len(fams), figsize=(5.2 * len(fams), 3.8), squeeze=False)
    for ax, family in zip(axes[0], fams):
        res = results[family]
        meshes = list(res["nodes"])
        for name, r in res["models"].items():
            ax.plot(range(len(meshes)), [r["test"][m] for m in meshes], "o-", label=name)
        ax.set_xticks(range(len(meshes)), [f"{m}\n({res['nodes'][m]})" for m in meshes])
        ax.set_yscale("log")
        ax.set_ylabel("test relative L2(D) error")
        ax.set_title(family)
    axes[0][-1].legend(fontsize=8)
    fig.tight_layout()
    paths.append(folder / f"{prefix}_mesh.png")
    fig.savefig(paths[-1], dpi=110)
    plt.close(fig)
    fig, axes = plt.subplots(1, len(fams), figsize=(5.2 * len(fams), 3.8), squeeze=False)
    for ax, family in zip(axes[0], fams):
        for name, r in results[family]["models"].items():
            ax.scatter(r["seconds_per_epoch"], r["test"]["train"], label=name)
            ax.annotate(name, (r["seconds_per_epoch"], r["test"]["train"]), fontsize=7)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("seconds per training epoch")
        ax.set_ylabel("test error, training mesh")
        ax.set_title(family)
    fig.tight_layout()
    paths.append(folder / f"{prefix}_time.png")
    fig.savefig(paths[-1], dpi=110)
    plt.close(fig)
    return paths


def combine(paths: list[Path], out: Path) -> dict:
    """Merge ``results.json`` files of runs with the same scale (e.g. models added later) into ``out``."""
    runs = [json.loads(Path(p).read_text()) for p in paths]
    if any(r["scale"] != runs[0]["scale"] or r.get("domain", "square") != runs[0].get("domain", "square")
           for r in runs):
        raise ValueError("can only combine runs of the same scale and domain")
    results = runs[0]["results"]
    for run in runs[1:]:
        for family, res in run["results"].items():
            results[family]["models"].update(res["models"])
    out.mkdir(parents=True, exist_ok=True)
    (out / "table.md").write_text(markdown(results, Scale(**runs[0]["scale"])))
    plot(results, out)
    print(table(results))
    return results
