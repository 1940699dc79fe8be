"""How accurately a mesh gives the Fourier coefficients of a function: nodal quadrature vs the
piecewise-linear interpolant integrated exactly.

    python benchmarks/fourier_quadrature.py --mesh-n 32 --modes 4 7

``mesh_fno``'s spectral layers take the coefficients of the nodal values by the lumped quadrature
of the mesh, :math:`\\hat u(m) = |B|^{-1} \\sum_i w_i u_i e^{-2\\pi i m \\cdot \\xi_i}`
(:func:`geoattn.nn.spectral.fourier_coefficients`). Its error grows with :math:`|m|` as the
exponential is sampled by fewer nodes per wavelength. FNO through a grid takes the coefficients
of the mesh's piecewise-linear interpolant, sampled on a fine grid. This script measures both on
every mesh of ``darcy_compare.py``'s square, for the smooth function
:math:`u = e^{\\sin(3x) y} \\cos(5y)`, against the coefficients of :math:`u` itself:

- ``nodal``: the lumped quadrature at the mesh's nodes;
- ``P1``: the mesh's linear interpolant of :math:`u` integrated exactly on its triangles
  (:func:`geoattn.nn.p1_fourier.p1_fourier_basis`, what ``MeshFNO(quadrature="p1")`` computes);
- the reference: the nodal quadrature of :math:`u` on the refined mesh refined ``--refine``
  times more.

Every coefficient is taken on one box, the padded bounding box of the training mesh
(``--padding``, as ``mesh_fno``), so all meshes transform on the same frame. The error is the
relative :math:`\\ell^2` error over all modes :math:`|m_k| \\le K`.
"""

from __future__ import annotations

import argparse

import torch

from darcy.meshes import benchmark_meshes

from geoattn.mesh import families, from_meshio
from geoattn.nn.p1_fourier import p1_fourier_basis
from geoattn.nn.spectral import box_frame, fourier_coefficients, fourier_modes


def function(pos: torch.Tensor) -> torch.Tensor:
    return torch.exp(torch.sin(3 * pos[:, 0]) * pos[:, 1]) * torch.cos(5 * pos[:, 1])


def coefficients(pos: torch.Tensor, weight: torch.Tensor, values: torch.Tensor, box, modes: int,
                 cells: torch.Tensor | None = None) -> torch.Tensor:
    """The coefficients ``[M]`` of ``values`` on ``box``: the dense nodal quadrature, or with
    ``cells`` the exact integral of the P1 interpolant."""
    frame, index = box_frame(pos, box=box), fourier_modes(modes, 2)
    weighted = None if cells is None else p1_fourier_basis(pos, cells, frame.xi, index)
    return fourier_coefficients(values[:, None], weight, frame, index, backend="dense", weighted=weighted)[0, :, 0]


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mesh-n", type=int, default=32, help="training mesh unit_square(n) (default 32)")
    parser.add_argument("--modes", type=int, nargs="+", default=[4, 7], help="K (default 4 7)")
    parser.add_argument("--refine", type=int, default=3, help="refinements of the refined mesh for the reference (default 3)")
    parser.add_argument("--padding", type=float, default=0.25, help="box padding (default 0.25, mesh_fno's)")
    args = parser.parse_args(argv)
    meshes = benchmark_meshes(args.mesh_n)
    train = from_meshio(meshes["train"], dtype=torch.float64)
    lo, hi = train.pos.min(0).values, train.pos.max(0).values
    box = (lo[None], (lo + (1 + args.padding) * (hi - lo))[None])
    truth = from_meshio(families.refine(meshes["refined"], args.refine), dtype=torch.float64)
    data = {name: from_meshio(mesh, dtype=torch.float64) for name, mesh in meshes.items()}
    results = {}
    print(f"{'mesh':<10}{'nodes':>7}{'K':>4}{'nodal':>11}{'P1':>11}")
    for modes in args.modes:
        exact = coefficients(truth.pos, truth.weight, function(truth.pos), box, modes)

        def error(c):
            return float((c - exact).abs().norm() / exact.abs().norm())

        for name, d in data.items():
            values = function(d.pos)
            row = {"nodes": len(d.pos), "nodal": error(coefficients(d.pos, d.weight, values, box, modes)),
                   "p1": error(coefficients(d.pos, d.weight, values, box, modes, d.cells))}
            results[f"{name}@{modes}"] = row
            print(f"{name:<10}{row['nodes']:>7}{modes:>4}{row['nodal']:>11.2e}{row['p1']:>11.2e}", flush=True)
    return results


if __name__ == "__main__":
    main()
