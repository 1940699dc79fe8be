r"""Darcy flow with the coefficient measures of Calvello, Kovachki, Levine and Stuart.

`Continuum Attention for Neural Operators <https://arxiv.org/abs/2406.06486>`_, §6.2.2: on
:math:`D = (0, 1)^2`,

.. math::
    -\nabla\cdot(a\nabla u) = 1 \text{ in } D, \qquad u = 0 \text{ on } \partial D, \qquad
    a = T(g), \quad g \sim \mathcal N\big(0, \sigma^2(-\Delta + \tau^2 I)^{-2}\big),

with the Neumann Laplacian acting on mean-zero functions, and the push-forwards

- lognormal: :math:`T_1(g) = e^{g}` (:class:`~geoattn.data.darcy.Lognormal`);
- piecewise constant: :math:`T_2(g) = 12` where :math:`g \ge 0`, else :math:`3`
  (:class:`~geoattn.data.darcy.PiecewiseConstant`).

The covariance constants differ between the versions of the paper (:data:`COVARIANCES`): the
earlier arXiv version states :math:`48^2(-\Delta + 12^2 I)^{-2}` in its LaTeX source
(``"v1"``, the default); the text of v3 is legible only through OCR, which reads as
:math:`12^2(-\Delta + 6^2 I)^{-2}` (``"v3"``, unconfirmed). The field is
:class:`~geoattn.data.grf.GaussianRandomField` (``alpha = 2``), so a sample is a function,
evaluated at the quadrature points of any mesh: the same continuum coefficient on every mesh.
"""

from __future__ import annotations

from collections.abc import Mapping

import meshio
import torch

from geoattn.data.darcy import FAMILIES, darcy_samples
from geoattn.data.grf import GaussianRandomField
from geoattn.errors import ConfigError
from geoattn.mesh import MeshData

#: :math:`(\sigma, \tau)` of the covariance :math:`\sigma^2(-\Delta + \tau^2 I)^{-2}` by paper
#: version: ``"v1"`` as in the LaTeX source of the earlier arXiv version, ``"v3"`` as the OCR of
#: arXiv v3 reads (unconfirmed).
COVARIANCES = {"v1": {"sigma": 48.0, "tau": 12.0}, "v3": {"sigma": 12.0, "tau": 6.0}}

#: The coefficient push-forwards of the paper: ``"lognormal"`` (:math:`e^g`) and ``"piecewise"``
#: (12 where :math:`g \ge 0`, else 3).
MAPS = tuple(FAMILIES)


def calvello_field(version: str = "v1", modes: int = 32, box=((0.0, 0.0), (1.0, 1.0))) -> GaussianRandomField:
    r"""The Gaussian random field :math:`\mathcal N(0, \sigma^2(-\Delta + \tau^2 I)^{-2})` of the
    paper's Darcy experiments, mean zero, Neumann cosine series with ``modes`` per axis.

    With ``"v1"`` (:math:`\sigma = 48, \tau = 12`) and 32 modes per axis the truncated series keeps
    99 % of the variance; the pointwise variance is about 1.15 inside the square (standard
    deviation 1.07, so :math:`e^g` spans about :math:`e^{\pm 3}`) and larger at the boundary,
    where the Neumann modes do not vanish (1.51 on average over the square).

    Args:
        version: ``"v1"`` or ``"v3"`` (:data:`COVARIANCES`). (default: ``"v1"``)
        modes: cosine modes per axis. (default: ``32``)
        box: the domain's box. (default: the unit square)
    """
    if version not in COVARIANCES:
        raise ConfigError(f"unknown paper version {version!r}; choose one of {sorted(COVARIANCES)}")
    return GaussianRandomField(alpha=2.0, box=box, modes=modes, mean_zero=True, **COVARIANCES[version])


def calvello_coefficient(seed: int, index: int, family: str = "lognormal",
                         field: GaussianRandomField | None = None):
    """Coefficient ``index`` of the stream ``seed``: ``T(g)`` for ``g = field.sample(seed, index)``
    (default field: :func:`calvello_field` ``()``), a callable on points ``[N, 2]``."""
    if family not in FAMILIES:
        raise ConfigError(f"unknown coefficient map {family!r}; choose one of {sorted(FAMILIES)}")
    return FAMILIES[family]((field or calvello_field()).sample(seed, index))


def calvello_darcy(meshes: Mapping[str, meshio.Mesh], n: int, seed: int, family: str = "lognormal",
                   start: int = 0, version: str = "v1", modes: int = 32,
                   dtype: torch.dtype | None = None) -> dict[str, list[MeshData]]:
    r"""Darcy samples ``start .. start + n - 1`` of the paper (:math:`f \equiv 1`), solved on every
    mesh: the same continuum coefficients on every mesh.

    Args:
        meshes: triangle meshes of the unit square, by name.
        n: number of samples.
        seed: stream seed; sample ``i`` depends only on ``(seed, i)``.
        family: ``"lognormal"`` or ``"piecewise"``. (default: ``"lognormal"``, Table 1)
        start: index of the first sample. (default: ``0``)
        version: covariance constants, ``"v1"`` or ``"v3"``. (default: ``"v1"``)
        modes: cosine modes per axis of the field. (default: ``32``)
        dtype: floating dtype of the tensors (default: torch's default dtype).

    Returns:
        For each mesh, a list of :class:`~geoattn.mesh.MeshData` with ``pos``, ``weight`` (lumped),
        ``cells`` (for the :math:`H^1` loss), ``x = a [N, 1]`` and ``y = u [N, 1]``.
    """
    if family not in FAMILIES:
        raise ConfigError(f"unknown coefficient map {family!r}; choose one of {sorted(FAMILIES)}")
    if n < 1 or start < 0:
        raise ConfigError(f"need n >= 1 and start >= 0, got n={n}, start={start}")
    return darcy_samples(meshes, n, seed, family, calvello_field(version, modes), f=1.0, start=start,
                         dtype=dtype)


__all__ = ["COVARIANCES", "MAPS", "calvello_coefficient", "calvello_darcy", "calvello_field"]
