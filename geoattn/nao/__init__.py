r"""The Nonlocal Attention Operator (Yu et al., NeurIPS 2024): kernels learned in context.

NAO is a different task from the field-to-field models of :mod:`geoattn.models`: from the
:math:`d` data pairs :math:`(g[u_j], f_j)` of one physical system it builds the system's kernel
:math:`K(x, y)` and predicts :math:`f_j(x) \approx \int K(x, y)\, g[u_j](y)\,dy`. Everything it
needs lives here, one module each:

- :mod:`~geoattn.nao.layer`: :class:`NonlocalAttention`, the residual linear-attention layer;
- :mod:`~geoattn.nao.model`: :class:`NAO` (and the mesh-bound :class:`DiscreteNAO` baseline),
  with :class:`TokenMesh` for its padded token meshes;
- :mod:`~geoattn.nao.fit`: :func:`fit_kernel_layer` (alternating least squares with the
  kernel-consistency term) and :func:`fit_adam` (first-order training of the whole model);
- :mod:`~geoattn.nao.radial` and :mod:`~geoattn.nao.microstructure`: the paper's radial kernel
  problem and its Darcy microstructure tasks (the latter needs the ``data`` extra);
- :mod:`~geoattn.nao.metrics`: :math:`E_f`, :math:`E_K` and the microstructure read-off.

In the library's convention the u-mesh of the loadings is the source mesh (``x``, ``pos``,
``weight``) and the f-mesh of the responses the query mesh (``x_query``, ``pos_query``,
``weight_query``), where the model answers.
"""

from .fit import KernelLayerFit, fit_adam, fit_kernel_layer, kernel_layer_objective, normal_equations
from .layer import NonlocalAttention
from .metrics import kernel_error, operator_error, radial_density, recover_microstructure
from .model import NAO, DiscreteNAO, KernelNetwork, TokenMesh
from .norm import TokenNorm
from .radial import (RadialKernelProblem, RadialSamples, cosine_kernel, diverse_kernels,
                     gaussian_kernel, ood1_kernel, polynomial_kernel, sine_kernel)

_LAZY = {"MicrostructureTask", "green_kernel", "microstructure_tasks"}  # need scikit-fem


def __getattr__(name: str):
    if name in _LAZY:
        from . import microstructure
        return getattr(microstructure, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "DiscreteNAO",
    "KernelLayerFit",
    "KernelNetwork",
    "MicrostructureTask",
    "NAO",
    "NonlocalAttention",
    "RadialKernelProblem",
    "RadialSamples",
    "TokenMesh",
    "TokenNorm",
    "cosine_kernel",
    "diverse_kernels",
    "fit_adam",
    "fit_kernel_layer",
    "gaussian_kernel",
    "green_kernel",
    "kernel_error",
    "kernel_layer_objective",
    "microstructure_tasks",
    "normal_equations",
    "ood1_kernel",
    "operator_error",
    "polynomial_kernel",
    "radial_density",
    "recover_microstructure",
    "sine_kernel",
]
