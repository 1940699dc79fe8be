"""Learning curves of the benchmarks that train models (``kolmogorov.py``, ``darcy_calvello.py``):
the test error after every epoch, one line per model, with the baselines as horizontal lines."""

from __future__ import annotations

from collections.abc import Mapping, Sequence


def draw_learning_curves(ax, curves: Mapping[str, Sequence[tuple[int, float]]], baselines: Mapping[str, float],
                         ylabel: str = "median relative L2 (test pairs, training grid)") -> None:
    """On ``ax``: each model's ``(epoch, error)`` points as a line (log scale) and each baseline
    (``{label: error}``) as a dashed horizontal line."""
    for name, points in curves.items():
        if points:
            epochs, errors = zip(*points)
            ax.plot(epochs, errors, marker="o", ms=2.5, lw=1.2, label=name)
    styles = ("--", ":", "-.")
    for k, (label, value) in enumerate(baselines.items()):
        ax.axhline(value, color="0.3", ls=styles[k % len(styles)], lw=1.0, label=f"{label} ({value:.3g})")
    ax.set_yscale("log")
    ax.set_xlabel("epoch")
    ax.set_ylabel(ylabel)
    ax.grid(True, which="both", lw=0.3, alpha=0.5)
    ax.legend(fontsize=8)


def time_table(results: Mapping[str, Mapping]) -> str:
    """Markdown rows per model: epochs trained, training time (over the sessions of a resumed
    run), seconds per epoch, the test error after the last epoch and the lowest one on the curve."""
    lines = ["| model | epochs | training time (s) | s / epoch | test error, last epoch | lowest (epoch) |",
             "|---|---|---|---|---|---|"]
    for name, r in results.items():
        curve = r.get("curve") or []
        if not curve:
            continue
        best = min(curve, key=lambda p: p[1])
        lines.append(f"| {name} | {r['epochs']} | {r['train_seconds']:.0f} | {r['train_seconds'] / r['epochs']:.1f} "
                     f"| {curve[-1][1]:.3e} | {best[1]:.3e} ({best[0]}) |")
    return "\n".join(lines)
