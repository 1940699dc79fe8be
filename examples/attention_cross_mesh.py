"""One attention layer, many meshes: weighted attention converges, plain attention does not.

A fixed smooth function is sampled on a strongly graded mesh of the unit square and on its
uniform refinements. One fixed ContinuumAttention layer reads each discretisation and, called
with a query side, answers at the same query points. With the lumped quadrature weights the
answers converge to a fine-mesh reference at second order; with uniform weights (plain softmax
over nodes) they converge to the wrong operator, one that over-weights the refined corner.

Run: ``python examples/attention_cross_mesh.py [--levels 4]``
"""

from __future__ import annotations

import argparse
import logging

import torch

from geoattn import testing
from geoattn.mesh import families
from geoattn.nn import ContinuumAttention

log = logging.getLogger(__name__)


def features(pos: torch.Tensor) -> torch.Tensor:
    x, y = pos[:, 0], pos[:, 1]
    return torch.stack([torch.sin(3 * x + y), torch.cos(2 * x * y), x * x - y, torch.exp(-x)], 1)


def main(levels: int = 4, reference_level: int = 7, seed: int = 0) -> dict[str, float]:
    """Errors of the weighted and unweighted layer per level, and the fitted orders."""
    torch.manual_seed(seed)
    layer = ContinuumAttention(4, num_heads=2).double()
    with torch.no_grad():
        layer.to_q.weight.mul_(4.0)  # sharper attention: a harder test of the quadrature
    query = torch.tensor([[0.1, 0.2], [0.5, 0.5], [0.9, 0.3], [0.7, 0.95]], dtype=torch.float64)
    *samples, ref = testing.refinement_samples(families.unit_square(4, "graded"),
                                               [*range(1, levels + 1), reference_level], features)
    result = {}
    with torch.no_grad():
        expected = layer(ref[0], ref[1], ref[2], x_query=features(query), pos_query=query)
        for name, uniform in (("weighted", False), ("unweighted", True)):
            errors = []
            for x, pos, w, h in samples:
                w_used = torch.ones_like(w) if uniform else w
                out = layer(x, pos, w_used, x_query=features(query), pos_query=query)
                err = (out - expected).abs().max()
                errors.append(err.item())
                log.info("%-10s nodes=%6d  h=%.4f  max error %.3e", name, len(x), h, errors[-1])
            result[f"{name}_rate"] = testing.convergence_rate([s[3] for s in samples], errors)
            result[f"{name}_final_error"] = errors[-1]
            log.info("%-10s fitted order %.2f", name, result[f"{name}_rate"])
    return result


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--levels", type=int, default=4)
    args = parser.parse_args()
    main(args.levels)
