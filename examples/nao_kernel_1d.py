"""Learn radial nonlocal kernels with NAO and read off the kernel of an unseen system.

Trains on the seven sine kernels of the NAO paper's radial problem (coarse grid, few epochs) and
logs the operator and kernel errors of the in-distribution test kernel (eta = 5). See
``benchmarks/nao.py radial`` for the longer run recorded in the docs.
"""

import logging

import torch

from geoattn.data.nonlocal_kernel import RadialKernelProblem, sine_kernel
from geoattn.eval.nao_metrics import kernel_error, operator_error, radial_density
from geoattn.models import NAO

log = logging.getLogger("nao_kernel_1d")


def main(dx=0.1, d=50, epochs=5, seed=0):
    torch.manual_seed(seed)
    prob = RadialKernelProblem(dx=dx)
    train = [prob.samples(sine_kernel(eta), d) for eta in (1, 2, 3, 4, 6, 7, 8)]
    test = prob.samples(sine_kernel(5.0), d)
    mesh = (test.pos[None], test.weight[None], test.pos_f[None], test.weight_f[None])
    u, f = torch.cat([s.u for s in train]), torch.cat([s.f for s in train])
    model = NAO(d, dim=1, dk=10, coord_scale=prob.delta).double()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    for _ in range(epochs):
        loss = operator_error(model.forward_dense(u, f, *mesh), f, mesh[3]).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    with torch.no_grad():
        e_f = operator_error(model.forward_dense(test.u, test.f, *mesh), test.f, mesh[3]).mean()
        K = model.kernel_dense(test.u, test.f, *mesh)  # (S, 1, N): K(r_k) of each test sample
        e_k = kernel_error(K, test.kernel[None, None], test.weight_f[None], test.weight[None],
                           radial_density(test.u)).mean()
    log.info("train E_f %.3f, test E_f %.3f, test E_K %.3f", loss.item(), float(e_f), float(e_k))
    return float(e_f), float(e_k)


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO)
    main()
