"""Learn radial nonlocal kernels with NAO and read off the kernel of an unseen system.

Trains NAO's kernel layer on the seven sine kernels of the NAO paper's radial problem by
alternating least squares (:func:`geoattn.nao.fit_kernel_layer`), with and without the
kernel-consistency term, and logs the operator and kernel errors of the in-distribution test
kernel (eta = 5).

Run: ``python examples/nao_kernel_1d.py [--dx 0.025] [--d 302] [--sweeps 8]`` (about 20 s with
the defaults; ``benchmarks/nao.py radial`` is the full run recorded in the docs).
"""

from __future__ import annotations

import argparse
import logging

import torch

from geoattn.nao import (NAO, RadialKernelProblem, fit_kernel_layer, kernel_error, operator_error,
                         radial_density, sine_kernel)

log = logging.getLogger(__name__)


def main(dx: float = 0.025, d: int = 302, head_channels: int = 10, sweeps: int = 8,
         consistency: tuple[float, ...] = (0.0, 1.0),
         seed: int = 0) -> dict[float, tuple[float, float]]:
    """Returns ``{consistency: (E_f, E_K)}`` of the test kernel, averaged over its samples."""
    prob = RadialKernelProblem(dx=dx)
    train = [prob.samples(sine_kernel(eta), d) for eta in (1, 2, 3, 4, 6, 7, 8)]
    test = prob.samples(sine_kernel(5.0), d)
    mesh, mesh_query = test.mesh, test.mesh_query  # the r-grid and the one-point f-mesh
    u, f = torch.cat([s.u for s in train]), torch.cat([s.f for s in train])
    systems = torch.repeat_interleave(torch.arange(len(train)), len(train[0].u))  # task of each sample
    su, sf = float(u.std()), float(f.std())  # one scale per field
    errors = {}
    for mu in consistency:
        torch.manual_seed(seed)
        model = NAO(d, dim=1, head_channels=head_channels, layers=1, coord_scale=prob.delta).double()
        model.mixer_u.zero_()  # the f-token carries the system; W^{P,u} stays untrained
        fit_kernel_layer(model, u / su, f / sf, mesh, mesh_query, systems=systems, consistency=mu,
                         sweeps=sweeps)
        with torch.no_grad():
            pred = model.forward_dense(test.u / su, test.f / sf, mesh, mesh_query) * sf
            K = model.kernel_dense(test.u / su, test.f / sf, mesh, mesh_query) * (sf / su)  # (S, 1, N)
        e_f = float(operator_error(pred, test.f, mesh_query.weight).mean())
        e_k = float(kernel_error(K, test.kernel[None, None], mesh_query.weight, mesh.weight,
                                 radial_density(test.u)).mean())
        log.info("consistency %g: test E_f %.3f, test E_K %.3f", mu, e_f, e_k)
        errors[mu] = (e_f, e_k)
    return errors


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dx", type=float, default=0.025)
    parser.add_argument("--d", type=int, default=302)
    parser.add_argument("--sweeps", type=int, default=8)
    args = parser.parse_args()
    main(dx=args.dx, d=args.d, sweeps=args.sweeps)
