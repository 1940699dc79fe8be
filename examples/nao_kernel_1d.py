"""Learn radial nonlocal kernels with NAO and read off the kernel of an unseen system.

Trains NAO's kernel layer on the seven sine kernels of the NAO paper's radial problem by
alternating least squares (:func:`geoattn.train.fit_kernel_layer`), with and without the
kernel-consistency term, and logs the operator and kernel errors of the in-distribution test
kernel (eta = 5). Takes about 20 s; see ``benchmarks/nao.py radial`` for the full run
recorded in the docs.
"""

import logging

import torch

from geoattn.data.nonlocal_kernel import RadialKernelProblem, sine_kernel
from geoattn.eval.nao_metrics import kernel_error, operator_error, radial_density
from geoattn.models import NAO
from geoattn.train import fit_kernel_layer

log = logging.getLogger("nao_kernel_1d")


def main(dx=0.025, d=302, dk=10, sweeps=8, consistency=(0.0, 1.0), seed=0):
    """Returns ``{consistency: (E_f, E_K)}`` of the test kernel, averaged over its samples."""
    prob = RadialKernelProblem(dx=dx)
    train = [prob.samples(sine_kernel(eta), d) for eta in (1, 2, 3, 4, 6, 7, 8)]
    test = prob.samples(sine_kernel(5.0), d)
    mesh = (test.pos[None], test.weight[None], test.pos_f[None], test.weight_f[None])
    u, f = torch.cat([s.u for s in train]), torch.cat([s.f for s in train])
    systems = torch.repeat_interleave(torch.arange(len(train)), len(train[0].u))  # task of each sample
    su, sf = float(u.std()), float(f.std())  # one scale per field
    errors = {}
    for mu in consistency:
        torch.manual_seed(seed)
        model = NAO(d, dim=1, dk=dk, layers=1, coord_scale=prob.delta).double()
        model.mixer_u.zero_()  # the f-token carries the system; W^{P,u} stays untrained
        fit_kernel_layer(model, u / su, f / sf, *mesh, systems=systems, consistency=mu,
                         sweeps=sweeps)
        with torch.no_grad():
            pred = model.forward_dense(test.u / su, test.f / sf, *mesh) * sf
            K = model.kernel_dense(test.u / su, test.f / sf, *mesh) * (sf / su)  # (S, 1, N)
        e_f = float(operator_error(pred, test.f, mesh[3]).mean())
        e_k = float(kernel_error(K, test.kernel[None, None], mesh[3], mesh[1],
                                 radial_density(test.u)).mean())
        log.info("consistency %g: test E_f %.3f, test E_K %.3f", mu, e_f, e_k)
        errors[mu] = (e_f, e_k)
    return errors


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO)
    main()
