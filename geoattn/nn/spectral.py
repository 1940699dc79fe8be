r"""Fourier integral operators on point clouds: quadrature-weighted non-uniform Fourier transforms.

A function sampled at nodes :math:`x_i` with weights :math:`w_i` has, on a box :math:`B` of side
lengths :math:`L` and corner :math:`a`, the Fourier coefficients

.. math::
    \hat u(m) = \frac{1}{|B|} \int_B u(x)\, e^{-2\pi i\, m \cdot (x - a)/L}\,dx
    \approx \frac{1}{|B|} \sum_i w_i\, u_i\, e^{-2\pi i\, m \cdot \xi_i},
    \qquad \xi_i = (x_i - a)/L,

for the modes :math:`m \in \{-K_1..K_1\} \times \dots \times \{-K_d..K_d\}` (``u`` is extended by
zero outside the domain). A spectral operator multiplies the coefficients mode by mode and
evaluates the truncated series at any points: the cost is :math:`O(N M C)` for ``M`` modes, no
grid and no FFT, so the same operator acts on every mesh of the domain. With finufft installed
(extra ``nufft``) the same sums go through non-uniform FFTs (:mod:`geoattn.nn.nufft`) in
:math:`O((N + M \log M) C)`, when a segment is large enough to profit (``backend="auto"``).

The transforms work per *segment* through a :class:`FourierFrame`: one segment per graph on its
bounding box (:func:`box_frame`, used by :class:`SpectralIntegral` and :class:`SpectralSmoothing`),
or one per patch in local patch coordinates (:func:`patch_frame`, used by
:class:`PatchSpectralIntegral` and :class:`~geoattn.nn.PatchAttention`).

A periodic domain is declared, never inferred: with ``period=`` the box of every graph is the
torus :math:`[0, L)^d` itself (:func:`periodic_box`), whatever the extent of the nodes. A torus
stored without its closing nodes has a bounding box one grid step short of the period, which
changes with the resolution; the declared period does not, and with periodic quadrature weights
(:func:`geoattn.mesh.periodic_weights`) the coefficients of a band-limited function are exact.
"""

from __future__ import annotations

import itertools
import math
from typing import NamedTuple, Sequence

import numpy as np
import torch
from torch import nn

from geoattn.errors import ConfigError
from geoattn.mesh.partition import patch_centroids

from . import nufft
from .functional import num_graphs as count_graphs, segment_matmul, weighted_gram

__all__ = [
    "BACKENDS",
    "FourierFrame",
    "ModeLinear",
    "NUFFT_MIN_MODES",
    "NUFFT_MIN_WORK",
    "PatchSpectralIntegral",
    "SpectralBasis",
    "SpectralIntegral",
    "SpectralSmoothing",
    "bounding_box",
    "box_frame",
    "check_period_extent",
    "checked_period",
    "dense_basis",
    "fourier_coefficients",
    "fourier_evaluate",
    "fourier_modes",
    "hermitian_part",
    "patch_frame",
    "periodic_box",
    "resolved_modes",
]


def fourier_modes(modes: int | Sequence[int], dim: int, device=None) -> torch.Tensor:
    """All integer modes :math:`m` with :math:`|m_k| \\le K_k`, in lexicographic order ``[M, d]``.

    The order is symmetric: reversing it maps every mode :math:`m` to :math:`-m`.

    Args:
        modes: :math:`K` for every dimension, or one :math:`K_k` per dimension.
        dim: spatial dimension :math:`d`.
    """
    ks = [modes] * dim if isinstance(modes, int) else list(modes)
    if len(ks) != dim or min(ks) < 0:
        raise ValueError(f"modes must be one non-negative int or {dim} of them, got {modes!r}")
    grid = list(itertools.product(*[range(-k, k + 1) for k in ks]))
    return torch.tensor(grid, dtype=torch.long, device=device)  # (M, d)


def resolved_modes(num_nodes: float, dim: int, oversampling: float = 2.0) -> int:
    r"""The largest :math:`K` whose modes a quadrature over ``num_nodes`` nodes resolves.

    A box seen through :math:`n` nodes has about :math:`n^{1/d}` of them across each direction,
    and the :math:`2K + 1` modes per direction need at least as many samples to be told apart:
    with fewer nodes than modes, :math:`n < (2K+1)^d`, the quadrature coefficients of one mesh
    are linearly dependent, and a trained operator can rely on relations between them that no
    other mesh satisfies. With ``oversampling`` :math:`s` samples per mode and direction,

    .. math::
        K = \max\Big(0,\ \Big\lfloor \frac{n^{1/d} / s - 1}{2} \Big\rfloor\Big),
        \qquad \text{the largest } K \text{ with } \big(s\,(2K+1)\big)^d \le n.

    Use it to choose the ``modes`` of a patch layer from the nodes per patch of the coarsest mesh
    it will see (``N / P`` for :math:`P` equal-weight patches), or of a global spectral layer from
    the nodes of the mesh.

    Args:
        num_nodes: nodes :math:`n` in the box (a patch or the whole domain).
        dim: spatial dimension :math:`d`.
        oversampling: samples per mode and direction :math:`s \ge 1` (default ``2``).
    """
    if oversampling < 1:
        raise ValueError(f"oversampling must be at least 1, got {oversampling}")
    across = max(float(num_nodes), 0.0) ** (1.0 / dim) / oversampling  # samples per direction / s
    k = int(math.floor((across - 1.0) / 2.0 + 1e-9))
    return max(k, 0)


class FourierFrame(NamedTuple):
    r"""Where each node sits in the reference box of its segment.

    Fields:

    - ``xi``: reference coordinates ``[N, d]`` (the basis is :math:`e^{2\pi i m \cdot \xi}`);
    - ``segment``: segment (graph or patch) of each node ``[N]``;
    - ``num_segments``: number of segments ``S``;
    - ``volume``: physical volume of each segment's box ``[S]`` (:math:`dx = |B|\,d\xi`);
    - ``counts`` (optional): nodes per segment as Python integers, when the nodes are sorted by
      segment (a graph's nodes are contiguous, as in a :class:`~geoattn.mesh.Mesh`); the
      transforms then never read the segment sizes back from the device. ``None`` (the
      default): they are counted from ``segment``.
    """

    xi: torch.Tensor
    segment: torch.Tensor
    num_segments: int
    volume: torch.Tensor
    counts: tuple[int, ...] | None = None


def box_frame(pos: torch.Tensor, batch: torch.Tensor | None = None, num_graphs: int | None = None,
              box: tuple[torch.Tensor, torch.Tensor] | None = None, *, layout=None) -> FourierFrame:
    """Frame of the bounding box of each graph: :math:`\\xi = (x - a)/L \\in [0, 1]^d`.

    Args:
        pos: coordinates ``[N, d]``.
        batch: graph index of each node ``[N]`` (default ``None``: one graph).
        num_graphs: number of graphs ``B`` (default from ``layout``, else from ``batch``).
        box: corners ``(lo [B, d], hi [B, d])`` to use instead of the bounding box of ``pos``
            (how output points are placed in the box of the source nodes).
        layout: the :class:`~geoattn.mesh.Layout` of ``batch`` (keyword, optional): the frame
            then carries its ``counts`` and nothing is read back from the device.

    Returns:
        a :class:`FourierFrame` with one segment per graph.
    """
    counts = None if layout is None else tuple(layout.counts)
    if batch is None:
        batch = torch.zeros(pos.shape[0], dtype=torch.long, device=pos.device)
        counts = (pos.shape[0],)  # one graph: every node in segment 0 (shape[0]: N symbolic under export)
    if num_graphs is not None:
        b = num_graphs
    else:
        b = layout.num_graphs if layout is not None else count_graphs(batch)
    if box is None:
        box = bounding_box(pos, batch, b)
    lo, hi = box
    side = hi - lo  # (B, d)
    xi = (pos - lo[batch]) / side[batch]
    return FourierFrame(xi, batch, b, side.prod(-1), counts)


def bounding_box(pos: torch.Tensor, batch: torch.Tensor, num_graphs: int,
                 weight: torch.Tensor | None = None):
    """Per-graph corners ``(lo [B, d], hi [B, d])`` of the axis-aligned bounding box.

    With ``weight``, nodes of weight 0 (padding) are ignored.
    """
    from torch_geometric.utils import scatter

    real = torch.ones_like(batch, dtype=torch.bool) if weight is None else weight > 0
    inf = torch.tensor(float("inf"), dtype=pos.dtype, device=pos.device)
    lo = scatter(torch.where(real[:, None], pos, inf), batch, dim=0, dim_size=num_graphs, reduce="min")
    hi = scatter(torch.where(real[:, None], pos, -inf), batch, dim=0, dim_size=num_graphs, reduce="max")
    return lo, hi


def periodic_box(period: tuple[float, ...], like: torch.Tensor, num_graphs: int):
    """Corners ``(lo [B, d], hi [B, d])`` of the torus :math:`[0, L)^d` for every graph.

    The origin is 0: the operators of this module commute with translations of the torus, so
    where it starts changes no output (a node at :math:`x` and at :math:`x + L` are one node).

    Args:
        period: :math:`L_k` per axis (``d`` floats, as :func:`checked_period` gives).
        like: a tensor of the dtype and device of the coordinates.
        num_graphs: number of graphs ``B``.
    """
    hi = torch.tensor(period, dtype=like.dtype, device=like.device).expand(num_graphs, -1)
    return torch.zeros_like(hi), hi


def checked_period(period: float | Sequence[float] | None, dim: int,
                   padding: float = 0.0) -> tuple[float, ...] | None:
    """``period`` as ``dim`` positive floats (``None`` stays ``None``), refusing a ``padding``:
    a torus has no boundary to pad.

    One number (any real type: ``int``, ``float``, a NumPy scalar, a 0-d tensor) or ``dim`` of
    them; booleans, non-finite and non-positive values, and periods below the smallest normal
    float32 (whose reciprocal overflows) are refused with
    :class:`~geoattn.errors.ConfigError`. A period shorter than the nodes' extent is refused
    when a model meets the nodes (:func:`check_period_extent`)."""
    from ..mesh.validation import checked_number

    if period is None:
        return None
    if torch.is_tensor(period) or isinstance(period, np.ndarray):
        period = period.tolist() if period.ndim else period.item()
    try:
        values = [period] * dim if not isinstance(period, (list, tuple)) else list(period)
    except TypeError:
        values = [period]
    if len(values) != dim:
        raise ConfigError(f"period must be one positive number or {dim} of them (one per axis), got {period!r}")
    tiny = float(torch.finfo(torch.float32).tiny)
    values = [checked_number("period", p) for p in values]
    small = next((p for p in values if p < tiny), None)
    if small is not None:
        raise ConfigError(f"period={small:g} is too small: below {tiny:.3g} (the smallest normal float32) "
                          "the coordinates divided by it overflow; give the period in the units of the "
                          "coordinates, or rescale both")
    if padding:
        raise ConfigError(f"padding={padding} with period={period!r}: the domain is periodic, so "
                         "there is no boundary to pad; give padding=0 (or period=None for a "
                         "non-periodic domain)")
    return tuple(float(p) for p in values)


def check_period_extent(period: tuple[float, ...], pos: torch.Tensor) -> None:
    """Refuse nodes ``pos [N, d]`` (of one graph) that span more than ``period`` along an axis:
    on the torus distinct nodes would fold onto one point. One host read."""
    if pos.shape[0] == 0:
        return
    extent = (pos.detach().amax(0) - pos.detach().amin(0)).tolist()
    over = [k for k, (e, p) in enumerate(zip(extent, period)) if e > p * (1 + 1e-6)]
    if over:
        k = over[0]
        raise ConfigError(f"period={period[k]:g} along axis {k} is shorter than the nodes' extent {extent[k]:.6g} "
                          "there: nodes a period apart would be one point of the torus; give the domain's "
                          "period (at least the extent), or period=None for a domain that is not periodic")


def patch_frame(pos: torch.Tensor, weight: torch.Tensor, patch: torch.Tensor, patch_length: float,
                batch: torch.Tensor | None = None, num_patches: int | None = None, *,
                layout=None) -> FourierFrame:
    """Frame of each patch: :math:`\\xi = (x - c_p)/L` about the weighted patch centroid.

    Every patch is seen in the same reference box :math:`[-1/2, 1/2]^d` of physical side ``L``
    (one length for all patches, e.g. :attr:`geoattn.mesh.Partition.length`).

    Args:
        pos: coordinates ``[N, d]``.
        weight: quadrature weights ``[N]``.
        patch: patch index of each node within its graph ``[N]``, in ``[0, P)``.
        patch_length: the global patch length :math:`L`.
        batch: graph index of each node ``[N]`` (default ``None``: one graph).
        num_patches: patches per graph :math:`P` (default ``patch.max() + 1``).
        layout: the :class:`~geoattn.mesh.Layout` of ``batch`` (keyword, optional): the number of
            graphs is taken from it instead of from the device.

    Returns:
        a :class:`FourierFrame` with segment ``batch * P + patch``.
    """
    p = num_patches if num_patches is not None else int(patch.max()) + 1
    segment = patch if batch is None else batch * p + patch
    num_segments = (count_graphs(batch) if layout is None else layout.num_graphs) * p
    centroid = patch_centroids(pos, weight, segment, num_segments)  # (S, d)
    xi = (pos - centroid[segment]) / patch_length
    volume = torch.full((num_segments,), float(patch_length) ** pos.shape[1], dtype=pos.dtype,
                        device=pos.device)
    return FourierFrame(xi, segment, num_segments, volume)


def _cos_sin(xi: torch.Tensor, modes: torch.Tensor) -> torch.Tensor:
    r""":math:`[\cos(2\pi m \cdot \xi_i), \sin(2\pi m \cdot \xi_i)]` ``[N, 2M]`` (real)."""
    angle = 2.0 * math.pi * (xi @ modes.to(xi.dtype).t())  # (N, M)
    return torch.cat([angle.cos(), angle.sin()], dim=-1)  # (N, 2M)


def _zero_index(modes: torch.Tensor, symmetric: bool | None = None) -> int | None:
    """Index of the mode 0 when ``modes`` is in a symmetric order (``-m`` at the mirrored place of
    every ``m``, as :func:`fourier_modes` gives), else ``None``. ``symmetric`` (when known, as
    for a layer's own :func:`fourier_modes`) skips the comparison, which reads the device."""
    m = len(modes)
    if symmetric is not None:
        return m // 2 if symmetric and m % 2 else None
    if m % 2 == 0 or not torch.equal(modes.flip(0), -modes):
        return None
    return m // 2


def dense_basis(xi: torch.Tensor, modes: torch.Tensor, *, symmetric: bool | None = None) -> torch.Tensor:
    r"""The real Fourier basis of the dense transforms at the reference coordinates ``xi``.

    For modes in the symmetric order of :func:`fourier_modes` (``M`` odd, mode 0 in the middle),
    real values need only the mode 0 and the half :math:`H` of the modes after it, since
    :math:`\hat u(-m) = \overline{\hat u(m)}`: the basis is
    :math:`[\cos(2\pi m \cdot \xi)_{m \in \{0\} \cup H}, \sin(2\pi m \cdot \xi)_{m \in H}]`,
    ``[N, M]``, half the work of all cosines and sines. Other mode sets get all of them,
    ``[N, 2M]``. Compute it once to share between transforms of the same points and modes
    (the ``basis`` of :func:`fourier_coefficients` and :func:`fourier_evaluate`).

    Args:
        xi: reference coordinates ``[N, d]`` (:attr:`FourierFrame.xi`).
        modes: integer modes ``[M, d]``.
        symmetric: whether ``modes`` is in the symmetric order of :func:`fourier_modes`
            (keyword; default ``None``: compared on the device).
    """
    zero = _zero_index(modes, symmetric)
    if zero is None:
        return _cos_sin(xi, modes)
    angle = 2.0 * math.pi * (xi @ modes[zero:].to(xi.dtype).t())  # (N, M_h): modes 0 and H
    return torch.cat([angle.cos(), angle[:, 1:].sin()], dim=-1)  # (N, M)


def _checked_basis(basis: torch.Tensor | None, xi: torch.Tensor, modes: torch.Tensor,
                   dtype: torch.dtype, symmetric: bool | None = None) -> torch.Tensor:
    if basis is None:
        return dense_basis(xi.to(dtype), modes, symmetric=symmetric)
    width = len(modes) if _zero_index(modes, symmetric) is not None else 2 * len(modes)
    if basis.shape != (xi.shape[0], width):  # shape[0]: N stays symbolic under export
        raise ValueError(f"basis has shape {tuple(basis.shape)}, the frame and modes need "
                         f"{(xi.shape[0], width)}: make it with dense_basis(frame.xi, modes)")
    return basis.to(dtype)


#: finufft's cost per node in a training step (forward and backward), in dense modes: the dense
#: transforms cost about :math:`N M` and finufft's about :math:`N` times this, whatever ``M``
#: (a crossover set by ``benchmarks/spectral.py``, whose page is ``docs/results/spectral.md``).
NUFFT_MIN_MODES = 450

#: finufft's fixed cost per segment, in node-mode products: ``backend="auto"`` uses finufft when
#: :math:`(M - \text{NUFFT_MIN_MODES})\, N_s \ge \text{NUFFT_MIN_WORK}` for the average node
#: count :math:`N_s` of a segment (e.g. 16 modes per dimension in 2-D, ``M = 1089``, from about
#: 1 600 nodes; never for ``M <= 450``).
NUFFT_MIN_WORK = 1_000_000

#: The values of ``backend``: finufft when it pays (``"auto"``), always, or never.
BACKENDS = ("auto", "dense", "finufft")


def _checked_backend(backend: str) -> str:
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    return backend


def _uses_nufft(backend: str, frame: FourierFrame, modes: torch.Tensor) -> bool:
    """Whether a transform of ``frame`` on ``modes`` goes through finufft (see ``backend``)."""
    if _checked_backend(backend) == "dense" or torch.compiler.is_exporting():  # finufft runs on the host
        return False
    if backend == "finufft":
        if not _is_mode_box(modes):
            raise ValueError("backend='finufft' needs the full mode box of fourier_modes(K, dim)")
        nufft.finufft()  # raises, naming the extra, when finufft is missing
        return True
    work = len(frame.xi) * (len(modes) - NUFFT_MIN_MODES)
    return (frame.xi.device.type == "cpu" and not frame.xi.requires_grad
            and work >= NUFFT_MIN_WORK * frame.num_segments and nufft.available()
            and _is_mode_box(modes))


def _mode_box(modes: torch.Tensor) -> tuple[int, ...]:
    """:math:`K_k` per dimension of the box spanned by ``modes`` ``[M, d]``."""
    return tuple(modes.abs().amax(0).tolist())


def _is_mode_box(modes: torch.Tensor) -> bool:
    """Whether ``modes`` is exactly :func:`fourier_modes` of its box (the order finufft uses)."""
    return torch.equal(modes.cpu(), fourier_modes(_mode_box(modes), modes.shape[1]))


def _by_segment(frame: FourierFrame) -> tuple[torch.Tensor, list[int]]:
    """Node order grouping the segments, and the node count of each segment."""
    order = torch.argsort(frame.segment, stable=True)
    return order, torch.bincount(frame.segment, minlength=frame.num_segments).tolist()


def _periodic_points(xi: torch.Tensor) -> torch.Tensor:
    r"""NUFFT points :math:`2\pi(\xi - \mathrm{round}(\xi)) \in [-\pi, \pi]`, the same
    exponentials for integer modes."""
    return 2.0 * math.pi * (xi - xi.round())


def fourier_coefficients(x: torch.Tensor, weight: torch.Tensor, frame: FourierFrame,
                         modes: torch.Tensor, backend: str = "auto",
                         basis: torch.Tensor | None = None,
                         weighted: torch.Tensor | None = None, *,
                         symmetric: bool | None = None) -> torch.Tensor:
    r"""Quadrature of the Fourier coefficients of every segment, ``[S, M, C]`` complex.

    .. math::
        \hat u_s(m) = \frac{1}{|B_s|} \sum_{i \in s} w_i\, u_i\, e^{-2\pi i\, m \cdot \xi_i}

    The dense backend computes it in real arithmetic (cosine and sine parts) with one weighted
    Gram matrix per segment, :math:`O(N M C)`; for the symmetric mode order of
    :func:`fourier_modes` it transforms the mode 0 and the half of the modes after it, and
    takes the others from :math:`\hat u_s(-m) = \overline{\hat u_s(m)}` (``x`` is real). The finufft backend computes one type-1 NUFFT per
    segment (:func:`geoattn.nn.nufft.nufft_type1`, the ``C`` channels as ``n_trans``),
    :math:`O(C (N + M \log M))`, to about ``1e-6`` relative in float32 and ``1e-12`` in float64.

    Args:
        x: real values ``[N, C]``.
        weight: quadrature weights ``[N]``.
        frame: the :class:`FourierFrame` of the nodes.
        modes: integer modes ``[M, d]`` from :func:`fourier_modes`.
        backend: ``"dense"``, ``"finufft"`` (error if it is not installed, or if ``modes`` is not
            a full :func:`fourier_modes` box) or ``"auto"`` (default: finufft when installed, on
            CPU tensors, without gradients in the positions, and with enough modes and nodes
            per segment to pay, :data:`NUFFT_MIN_MODES` and :data:`NUFFT_MIN_WORK`; dense
            otherwise).
        basis: :func:`dense_basis` of ``frame.xi`` and ``modes``, to reuse one computed for
            other transforms of the same nodes (default ``None``: computed here when the dense
            backend runs).
        weighted: the basis with the quadrature in it, in the layout of :func:`dense_basis`: per
            node the integral of its hat function against each cosine and sine
            (:func:`~geoattn.nn.p1_fourier.p1_fourier_basis`), used instead of ``weight`` times
            ``basis`` (default ``None``: the nodal quadrature). Dense transforms only.
        symmetric: whether ``modes`` is in the symmetric order of :func:`fourier_modes`
            (keyword; default ``None``: compared on the device).
    """
    m, zero = len(modes), _zero_index(modes, symmetric)
    if weighted is not None:
        if backend == "finufft":
            raise ValueError("a weighted basis needs the dense transform, got backend='finufft'")
        trig = _checked_basis(weighted, frame.xi, modes, x.dtype, symmetric)
        weight = torch.ones_like(weight)
    elif _uses_nufft(backend, frame, modes):
        return _nufft_coefficients(x, weight, frame, modes)
    else:
        trig = _checked_basis(basis, frame.xi, modes, x.dtype, symmetric)  # (N, M) or (N, 2M)
    gram = weighted_gram(trig, x, weight, frame.segment, frame.num_segments,
                         counts=frame.counts)  # (S, M | 2M, C)
    gram = gram / frame.volume.to(gram.dtype).view(-1, 1, 1)
    if zero is None:
        return torch.complex(gram[:, :m], -gram[:, m:])  # (S, M, C)
    cos, sin = gram[:, :zero + 1], gram[:, zero + 1:]  # modes 0 and H; modes H
    half = torch.complex(cos, -torch.cat([torch.zeros_like(cos[:, :1]), sin], dim=1))
    return torch.cat([half[:, 1:].flip(1).conj(), half], dim=1)  # (S, M, C): u(-m) = conj u(m)


def _nufft_coefficients(x, weight, frame, modes):
    n_modes = tuple(2 * k + 1 for k in _mode_box(modes))
    c = x.shape[1]
    points = _periodic_points(frame.xi.to(x.dtype))  # (N, d)
    values = (x * weight.to(x.dtype)[:, None]).to(x.dtype.to_complex()).t()  # (C, N)
    order, counts = _by_segment(frame)
    coeff = [nufft.nufft_type1(points[idx], values[:, idx], n_modes).reshape(c, -1).t()  # (M, C)
             if len(idx) else values.new_zeros(len(modes), c)
             for idx in order.split(counts)]
    return torch.stack(coeff) / frame.volume.to(x.dtype).view(-1, 1, 1)  # (S, M, C)


def fourier_evaluate(coeff: torch.Tensor, frame: FourierFrame, modes: torch.Tensor,
                     backend: str = "auto", basis: torch.Tensor | None = None, *,
                     symmetric: bool | None = None) -> torch.Tensor:
    r"""Evaluate the truncated series :math:`\mathrm{Re} \sum_m \hat u_s(m) e^{2\pi i m \cdot \xi}`.

    Dense (:math:`O(N M C)`) or, with finufft, one type-2 NUFFT per segment
    (:func:`geoattn.nn.nufft.nufft_type2`); ``backend`` as in :func:`fourier_coefficients`. For
    the symmetric mode order of :func:`fourier_modes` the dense backend sums over the mode 0 and
    the half :math:`H` of the modes after it, with the exact identity
    :math:`\mathrm{Re} \sum_m c(m) e_m = \mathrm{Re}\, c(0)
    + \sum_{m \in H} \mathrm{Re}\big[(c(m) + \overline{c(-m)})\, e_m\big]` (any ``coeff``).

    Args:
        coeff: coefficients ``[S, M, C]`` (complex).
        frame: the :class:`FourierFrame` of the evaluation points (segment of each point).
        modes: integer modes ``[M, d]``.
        backend: ``"auto"`` (default), ``"dense"`` or ``"finufft"``.
        basis: :func:`dense_basis` of ``frame.xi`` and ``modes`` (default ``None``: computed
            here when the dense backend runs).
        symmetric: whether ``modes`` is in the symmetric order of :func:`fourier_modes`
            (keyword; default ``None``: compared on the device).

    Returns:
        real values ``[N, C]``.
    """
    if _uses_nufft(backend, frame, modes):
        return _nufft_evaluate(coeff, frame, modes)
    zero = _zero_index(modes, symmetric)
    trig = _checked_basis(basis, frame.xi, modes, coeff.real.dtype, symmetric)  # (N, M) or (N, 2M)
    if zero is None:
        stacked = torch.cat([coeff.real, -coeff.imag], dim=1)  # (S, 2M, C): Re(c e) = c_r cos - c_i sin
    else:
        pair = coeff[:, zero + 1:] + coeff[:, :zero].flip(1).conj()  # c(m) + conj c(-m), m in H
        stacked = torch.cat([coeff[:, zero:zero + 1].real, pair.real, -pair.imag], dim=1)  # (S, M, C)
    return segment_matmul(trig, stacked, frame.segment, counts=frame.counts)


def _nufft_evaluate(coeff, frame, modes):
    n_modes = tuple(2 * k + 1 for k in _mode_box(modes))
    s, _, c = coeff.shape
    points = _periodic_points(frame.xi.to(coeff.real.dtype))  # (N, d)
    order, counts = _by_segment(frame)
    grid = coeff.transpose(1, 2).reshape(s, c, *n_modes)  # (S, C, n_1, ..., n_d)
    out = [nufft.nufft_type2(points[idx], grid[g]).real.t()  # (N_g, C)
           for g, idx in enumerate(order.split(counts)) if len(idx)]
    out = torch.cat(out) if out else points.new_zeros(0, c)  # (N, C), segment order
    return torch.empty_like(out).index_copy(0, order, out)


def hermitian_part(coeff: torch.Tensor, dim: int = -2) -> torch.Tensor:
    """Coefficients of the real part of a series: :math:`(c(m) + \\overline{c(-m)})/2`.

    Relies on the symmetric mode order of :func:`fourier_modes` (mode axis ``dim``).
    """
    return 0.5 * (coeff + coeff.flip(dim).conj())


class ModeLinear(nn.Module):
    r"""Channel mixing by a learned complex matrix per Fourier mode.

    .. math::
        \hat v(m) = R(m)\, \hat u(m), \qquad R(m) \in \mathbb{C}^{C_\text{out} \times C_\text{in}},

    followed by :func:`hermitian_part`, so that the output is the spectrum of a real function.

    Args:
        in_channels: :math:`C_\text{in}`.
        out_channels: :math:`C_\text{out}`.
        num_modes: number of modes :math:`M`.

    Shapes:
        - **input:** ``[*, M, C_in]`` complex.
        - **output:** ``[*, M, C_out]`` complex.
    """

    def __init__(self, in_channels: int, out_channels: int, num_modes: int):
        super().__init__()
        self.in_channels, self.out_channels, self.num_modes = in_channels, out_channels, num_modes
        # real storage of the complex weights (M, C_in, C_out, 2): optimisers and DDP see reals
        self.weight = nn.Parameter(torch.empty(num_modes, in_channels, out_channels, 2))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        scale = 1.0 / math.sqrt(self.in_channels)
        nn.init.uniform_(self.weight, -scale, scale)

    def forward(self, coeff: torch.Tensor) -> torch.Tensor:
        w = torch.view_as_complex(self.weight.to(coeff.real.dtype))  # (M, C_in, C_out)
        return hermitian_part(torch.einsum("...mi,mio->...mo", coeff, w))

    def extra_repr(self) -> str:
        return f"{self.in_channels}, {self.out_channels}, num_modes={self.num_modes}"


class SpectralBasis(NamedTuple):
    """The part of a :class:`SpectralIntegral` that depends on the nodes alone
    (:meth:`SpectralIntegral.basis`).

    Fields: ``frame`` (:class:`FourierFrame` of the nodes), ``box`` (corners ``(lo, hi)`` of the
    padded box of each graph, ``[B, d]`` each), ``side`` (the unpadded box sides ``[B, d]``),
    ``trig`` (the :func:`dense_basis` of the frame, ``None`` when finufft runs), ``modes`` and
    ``padding`` (of the layer that made it), ``weighted`` (optional: the basis with the
    quadrature in it for the forward transform, the ``weighted`` of :func:`fourier_coefficients`;
    ``None``, the default, uses the nodal quadrature), ``period`` (of the layer that made it) and
    ``mode_box`` (the :math:`K_k` of ``modes`` as Python integers, so that another layer checks
    that the basis fits it without reading ``modes`` from the device).
    """

    frame: FourierFrame
    box: tuple[torch.Tensor, torch.Tensor]
    side: torch.Tensor
    trig: torch.Tensor | None
    modes: torch.Tensor
    padding: float
    weighted: torch.Tensor | None = None
    period: tuple[float, ...] | None = None
    mode_box: tuple[int, ...] | None = None


class SpectralIntegral(nn.Module):
    r"""Fourier integral operator on point clouds, evaluable at any output points.

    The operator :math:`(\mathcal K u)(y) = \mathcal F^{-1}(R \cdot \mathcal F u)(y)` on the bounding
    box :math:`B = a + [0, L]` of each graph, with learned complex weights on the retained modes
    (Definition 20 of Calvello et al., *Continuum Attention for Neural Operators*):

    .. math::
        (\mathcal K u)(y) = \mathrm{Re} \sum_{|m_k| \le K_k} R(m)\, \hat u(m)\,
        e^{2\pi i\, m \cdot (y - a)/L},
        \qquad
        \hat u(m) = \frac{1}{|B|} \sum_i w_i\, u_i\, e^{-2\pi i\, m \cdot (x_i - a)/L}.

    The box is that of the nodes of positive weight of each graph, extended by the fraction
    ``padding`` of its sides on the upper end of every axis, :math:`L = (1 + p)(b - a)`, as FNO pads
    non-periodic domains: the truncated series is then periodic on the larger box, and need not
    match the function's values on opposite sides of the domain.

    On a periodic domain, declare it: with ``period`` :math:`L` the box is the torus
    :math:`[0, L)^d` of every graph (:math:`a = 0`; the operator commutes with translations, so
    the origin changes nothing), whatever the extent of the nodes, and ``padding`` must be 0. A
    torus is usually stored without its closing nodes (:math:`x_j = jL/n`, :math:`j < n`), so
    its bounding box is :math:`L(1 - 1/n)`: without ``period`` the frame, and the operator,
    change with the resolution. With ``period`` and periodic quadrature weights
    (:func:`geoattn.mesh.periodic_weights`) the operator is the same on every grid of the torus,
    and exact on uniform grids for inputs band-limited below the grid's Nyquist mode. The coefficients are a
    quadrature of the continuum Fourier integral, so the output converges
    at the order of the quadrature as the mesh is refined. The cost is
    :math:`O((N + N_\text{out}) M C + M C_\text{in} C_\text{out})` for :math:`M` modes with dense
    transforms, and :math:`O((N + N_\text{out} + M \log M) C + M C_\text{in} C_\text{out})` with
    finufft.

    Args:
        in_channels: :math:`C_\text{in}`.
        out_channels: :math:`C_\text{out}`.
        modes: :math:`K` per dimension (int or sequence of ``dim`` ints); ``M = prod(2K + 1)``.
        dim: spatial dimension :math:`d`.
        padding: fraction :math:`p \ge 0` by which the box extends past the nodes (default ``0``).
        backend: how the transforms are computed, ``"auto"`` (default), ``"dense"`` or
            ``"finufft"`` (:func:`fourier_coefficients`); the results agree to the precision of
            the dtype.
        period: the period :math:`L` of a periodic domain, one float or one per dimension
            (default ``None``: not periodic, the padded bounding box); the nodes lie in
            :math:`[0, L)^d` or any translate of it. A nonzero ``padding`` with it is a
            ``ValueError``.

    Shapes:
        - **input:** ``x [N, C_in]``, ``pos [N, d]``, ``weight [N]``, ``batch [N]`` (optional),
          and the output points ``pos_query [Nq, d]`` and ``batch_query [Nq]`` (optional keywords;
          default: the input nodes); ``basis``, the :class:`SpectralBasis` of ``pos``, ``weight``
          and ``batch`` from :meth:`basis` of this layer or one with the same modes, padding and
          period (optional keyword: computed when not given); ``layout`` and ``layout_query``,
          the :class:`~geoattn.mesh.Layout` of ``batch`` and ``batch_query`` (optional keywords,
          as a model passes ``mesh.layout``: the graphs' sizes are then never read back from the
          device).
        - **output:** ``[Nq, C_out]``.
    """

    def __init__(self, in_channels: int, out_channels: int, modes: int | Sequence[int], dim: int,
                 padding: float = 0.0, backend: str = "auto",
                 period: float | Sequence[float] | None = None):
        super().__init__()
        if padding < 0:
            raise ValueError(f"padding must be >= 0, got {padding}")
        self.in_channels, self.out_channels, self.dim = in_channels, out_channels, dim
        self.padding, self.backend = padding, _checked_backend(backend)
        self.period = checked_period(period, dim, padding)
        self.modes = modes
        self.register_buffer("mode_index", fourier_modes(modes, dim), persistent=False)
        self.mode_box = _mode_box(self.mode_index)
        self.mix = ModeLinear(in_channels, out_channels, len(self.mode_index))

    def reset_parameters(self) -> None:
        self.mix.reset_parameters()

    def multiply(self, coeff: torch.Tensor, side: torch.Tensor) -> torch.Tensor:
        """The mode-wise map ``[B, M, C_in] -> [B, M, C_out]`` (``side``: box sides ``[B, d]``)."""
        return self.mix(coeff)

    def forward(self, x: torch.Tensor, pos: torch.Tensor, weight: torch.Tensor,
                batch: torch.Tensor | None = None, *, pos_query: torch.Tensor | None = None,
                batch_query: torch.Tensor | None = None,
                basis: SpectralBasis | None = None, layout=None, layout_query=None) -> torch.Tensor:
        if pos.shape[-1] != self.dim:
            raise ValueError(f"pos has dimension {pos.shape[-1]}, the layer was built for dim={self.dim}")
        if pos_query is None and batch_query is not None:
            raise ValueError("batch_query without pos_query: pass the output points too")
        if pos_query is not None and (batch is None) != (batch_query is None):
            raise ValueError("give both batch and batch_query, or neither")
        if basis is not None:
            b = basis.frame.num_segments
        else:
            b = layout.num_graphs if layout is not None else count_graphs(batch)
        if batch_query is not None:
            bq = layout_query.num_graphs if layout_query is not None else count_graphs(batch_query)
            if bq > b:
                raise ValueError(f"batch_query names {bq} graphs, the input has {b}")
        if basis is None:
            basis = self.basis(pos, weight, batch, layout=layout)
        elif basis.period != self.period or basis.modes is not self.mode_index and not (
                self._same_modes(basis) and basis.padding == self.padding):
            raise ValueError("basis was made by a layer with other modes or padding, or another "
                             "period: make it with this layer's basis()")
        frame = basis.frame
        coeff = fourier_coefficients(x, weight, frame, self.mode_index, self.backend, basis.trig, basis.weighted,
                                     symmetric=True)
        coeff = self.multiply(coeff, basis.side)
        trig = basis.trig
        if pos_query is not None:
            frame, trig = box_frame(pos_query, batch_query, b, box=basis.box, layout=layout_query), None
        return fourier_evaluate(coeff, frame, self.mode_index, self.backend, trig, symmetric=True)

    def _same_modes(self, basis: SpectralBasis) -> bool:
        """Whether ``basis`` was made on this layer's modes (both :func:`fourier_modes` boxes:
        compared as Python integers when the basis carries its box, else on the device)."""
        if basis.mode_box is not None:
            return basis.mode_box == self.mode_box
        return torch.equal(basis.modes, self.mode_index)

    def basis(self, pos: torch.Tensor, weight: torch.Tensor,
              batch: torch.Tensor | None = None, *, layout=None) -> "SpectralBasis":
        """What the layer computes from the nodes alone: their frame in the padded box (or the
        torus, with ``period``) of each graph and, when the dense backend runs, their
        :func:`dense_basis`. Layers with the same modes, padding and period (the blocks of
        :class:`~geoattn.models.MeshFNO`) share one, passed as ``basis`` to :meth:`forward`; the
        result is the same as without it. ``layout`` (keyword): the
        :class:`~geoattn.mesh.Layout` of ``batch``, so that nothing is read from the device."""
        b = layout.num_graphs if layout is not None else count_graphs(batch)
        if batch is None:
            batch = torch.zeros(pos.shape[0], dtype=torch.long, device=pos.device)  # shape[0]: N stays symbolic under export
            layout = None  # box_frame counts the one graph itself
        if self.period is None:
            lo, hi = bounding_box(pos, batch, b, weight)
            side = hi - lo
            box = (lo, lo + (1.0 + self.padding) * side)
        else:
            box = periodic_box(self.period, pos, b)
            side = box[1]
        frame = box_frame(pos, batch if layout is not None or b > 1 else None, b, box=box, layout=layout)
        dense = not _uses_nufft(self.backend, frame, self.mode_index)
        trig = dense_basis(frame.xi, self.mode_index, symmetric=True) if dense else None
        return SpectralBasis(frame, box, side, trig, self.mode_index, self.padding, period=self.period,
                             mode_box=self.mode_box)

    def extra_repr(self) -> str:
        pad = f", padding={self.padding}" if self.padding else ""
        pad += f", period={self.period}" if self.period is not None else ""
        pad += f", backend={self.backend!r}" if self.backend != "auto" else ""
        return f"{self.in_channels}, {self.out_channels}, modes={self.modes}, dim={self.dim}{pad}"


class SpectralSmoothing(SpectralIntegral):
    r"""The smoothing layer :math:`z \mapsto (I - \varepsilon\Delta)^{-\alpha} z` (Remark 21).

    Applied in the Fourier basis of the bounding box :math:`B = a + [0, L]` (periodic extension),
    or of the torus :math:`[0, L)^d` when ``period`` :math:`L` is given, to the retained modes
    :math:`|m_k| \le K_k` only, as a correction of the identity:

    .. math::
        S z(y) = z(y) + \mathrm{Re} \sum_{|m_k| \le K_k}
        \Big(\big(1 + \varepsilon |2\pi m / L|^2\big)^{-\alpha} - 1\Big)\, \hat z(m)\,
        e^{2\pi i\, m \cdot (y - a)/L},

    with :math:`\hat z(m)` the quadrature Fourier coefficients of :class:`SpectralIntegral`. On a
    periodic field resolved by the retained modes this is :math:`(I - \varepsilon\Delta)^{-\alpha}`;
    the part of :math:`z` the modes do not represent (a non-periodic field's jump across the box,
    the modes beyond :math:`K`) passes unchanged, so :math:`S \to I` as :math:`\varepsilon \to 0`
    on any field (the multiplier :math:`-\alpha\varepsilon|2\pi m/L|^2 + O(\varepsilon^2)` goes to
    zero). No learned parameters; channels are smoothed independently. The paper uses
    :math:`\varepsilon = 10^{-3}`, :math:`\alpha = 1.001` on periodic problems: declare their
    ``period``, else the box is the nodes' bounding box, short of the period by a grid step on
    a torus stored without its closing nodes, and the multiplier is that of the wrong box. With
    the period and periodic weights (:func:`geoattn.mesh.periodic_weights`) on a uniform grid,
    the layer multiplies every retained mode of a band-limited field by
    :math:`(1 + \varepsilon |2\pi m / L|^2)^{-\alpha}` exactly.

    Args:
        modes: :math:`K` per dimension.
        dim: spatial dimension :math:`d`.
        eps: :math:`\varepsilon > 0` (default ``1e-3``).
        alpha: :math:`\alpha > 0` (default ``1.001``).
        backend: ``"auto"`` (default), ``"dense"`` or ``"finufft"``, as :class:`SpectralIntegral`.
        period: the period :math:`L` of a periodic domain, one float or one per dimension
            (default ``None``: the bounding box), as :class:`SpectralIntegral`.

    Shapes:
        - **input:** ``x [N, C]``, ``pos [N, d]``, ``weight [N]``, ``batch [N]`` (optional), any
          number of channels ``C``; ``layout``, the :class:`~geoattn.mesh.Layout` of ``batch``
          (optional keyword, see :class:`SpectralIntegral`).
        - **output:** ``[N, C]`` (on the input nodes).
    """

    def __init__(self, modes: int | Sequence[int], dim: int, eps: float = 1e-3, alpha: float = 1.001,
                 backend: str = "auto", period: float | Sequence[float] | None = None):
        nn.Module.__init__(self)
        if eps <= 0 or alpha <= 0:
            raise ValueError(f"eps and alpha must be positive, got eps={eps}, alpha={alpha}")
        self.dim, self.modes, self.eps, self.alpha, self.padding = dim, modes, eps, alpha, 0.0
        self.backend, self.period = _checked_backend(backend), checked_period(period, dim)
        self.register_buffer("mode_index", fourier_modes(modes, dim), persistent=False)
        self.mode_box = _mode_box(self.mode_index)

    def reset_parameters(self) -> None:
        pass

    def multiply(self, coeff: torch.Tensor, side: torch.Tensor) -> torch.Tensor:
        wave = 2.0 * math.pi * self.mode_index.to(side.dtype)[None] / side[:, None]  # (B, M, d)
        factor = torch.expm1(-self.alpha * torch.log1p(self.eps * wave.pow(2).sum(-1)))  # (B, M)
        return coeff * factor.unsqueeze(-1).to(coeff.dtype)

    def forward(self, x: torch.Tensor, pos: torch.Tensor, weight: torch.Tensor,
                batch: torch.Tensor | None = None, *, layout=None) -> torch.Tensor:
        return x + super().forward(x, pos, weight, batch, layout=layout)

    def extra_repr(self) -> str:
        period = f", period={self.period}" if self.period is not None else ""
        return f"modes={self.modes}, dim={self.dim}, eps={self.eps}, alpha={self.alpha}{period}"


class PatchSpectralIntegral(SpectralIntegral):
    r"""Fourier integral operator applied to every patch in its local frame (ViT-NO lifting).

    Each patch function is mapped to the reference box :math:`[-1/2, 1/2]^d` of side :math:`L`
    about its weighted centroid :math:`c_p` (:func:`patch_frame`) and transformed there, with the
    same weights :math:`R` for all patches:

    .. math::
        (\mathcal K \tilde u)(p)(x) = \mathrm{Re} \sum_{m} R(m)\, \hat u_p(m)\,
        e^{2\pi i\, m \cdot (x - c_p)/L},
        \qquad
        \hat u_p(m) = \frac{1}{L^d} \sum_{i \in D_p} w_i\, u_i\, e^{-2\pi i\, m \cdot (x_i - c_p)/L}.

    This is the resolution-independent replacement of ViT's "flatten and project" patch
    embedding, and the spectral :math:`Q, K, V` of FANO.

    Every patch has its own frame, so a domain's period does not apply (``period`` other than
    ``None`` is a ``ValueError``; ``padding`` is unused).

    Args:
        in_channels, out_channels, modes, dim, backend: as :class:`SpectralIntegral`.

    Shapes:
        - **input:** ``x [N, C_in]``, ``pos [N, d]``, ``weight [N]``, ``batch [N]`` (optional),
          and the keywords ``patch [N]`` (patch index within the graph), ``patch_length``
          (float, default ``1``), ``num_patches`` (optional :math:`P`) and ``layout`` (optional,
          the :class:`~geoattn.mesh.Layout` of ``batch``: the number of graphs is taken from it).
        - **output:** ``[N, C_out]``.
    """

    def __init__(self, in_channels: int, out_channels: int, modes: int | Sequence[int], dim: int,
                 padding: float = 0.0, backend: str = "auto", period: None = None):
        if period is not None:
            raise ValueError(f"period={period!r}: a patch is transformed in its own frame, so a "
                             "domain's period does not apply; give period=None")
        super().__init__(in_channels, out_channels, modes, dim, padding, backend)

    def forward(self, x: torch.Tensor, pos: torch.Tensor, weight: torch.Tensor,
                batch: torch.Tensor | None = None, *, patch: torch.Tensor,
                patch_length: float = 1.0, num_patches: int | None = None, layout=None) -> torch.Tensor:
        frame = patch_frame(pos, weight, patch, patch_length, batch, num_patches, layout=layout)
        coeff = self.mix(fourier_coefficients(x, weight, frame, self.mode_index, self.backend, symmetric=True))
        return fourier_evaluate(coeff, frame, self.mode_index, self.backend, symmetric=True)
