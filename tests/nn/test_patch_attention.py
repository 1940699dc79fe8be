import itertools
import math

import pytest
import torch

from geoattn.mesh import families, from_meshio, partition
from geoattn.nn.patch_attention import PatchAttention
from geoattn.testing import (assert_convergence_rate, assert_duplication_invariant,
                             assert_permutation_equivariant, refinement_samples)


def _series(coeff_fn, modes, xi):
    """Real function Re sum_m c(m) e^{2 pi i m.xi} at points xi [n, d]; c(m): [C] complex."""
    out = 0
    for m in modes:
        mt = torch.tensor(m, dtype=torch.float64)
        out = out + (coeff_fn(m)[None, :] * torch.exp(2j * math.pi * (xi @ mt))[:, None]).real
    return out


def _slow(layer, xs, ps, ws, patch_s, length, xq=None, pq=None, wq=None, patch_q=None):
    """Patched attention written out: per-patch coefficients by explicit sums, L2 scores on a
    uniform grid of the reference box (exact for the trigonometric polynomials involved), values
    evaluated pointwise at the query nodes. Keys and values from the source side ``xs``, queries
    from the query side ``xq`` (default: the source)."""
    if xq is None:
        xq, pq, wq, patch_q = xs, ps, ws, patch_s
    K = layer.modes
    modes = list(itertools.product(range(-K, K + 1), repeat=2))
    h, dk = layer.num_heads, layer.head_channels
    n_grid = 4 * K + 1
    g = (torch.arange(n_grid, dtype=torch.float64) / n_grid) - 0.5
    grid = torch.stack(torch.meshgrid(g, g, indexing="ij"), -1).reshape(-1, 2)

    def coefficients(x, pos, w, patch, p):
        idx = (patch == p).nonzero().squeeze(1)
        c = (w[idx, None] * pos[idx]).sum(0) / w[idx].sum()
        xi = (pos[idx] - c) / length
        coef = {m: (w[idx, None] * x[idx] * torch.exp(-2j * math.pi * (xi @ torch.tensor(m, dtype=torch.float64)))[:, None]).sum(0) / length**2
                for m in modes}
        return coef, idx, xi

    def apply(lin, coef):
        if layer.spectral_qkv:  # per-mode complex matrix, then the real part of the series
            r = torch.view_as_complex(lin.weight.detach())
            return lambda m: coef[m] @ r[modes.index(m)]
        wmat = lin.weight.detach().to(torch.complex128)
        return lambda m: coef[m] @ wmat.t()

    src = [coefficients(xs, ps, ws, patch_s, p) for p in range(int(patch_s.max()) + 1)]
    qry = [coefficients(xq, pq, wq, patch_q, p) for p in range(int(patch_q.max()) + 1)]
    out = torch.zeros(len(xq), layer.channels, dtype=torch.float64)
    for coef_j, idx_j, xi_j in qry:
        qf = _series(apply(layer.q, coef_j), modes, grid)  # (G, C) on the reference grid
        ks = [_series(apply(layer.k, c), modes, grid) for c, _, _ in src]
        vs = [_series(apply(layer.v, c), modes, xi_j) for c, _, _ in src]  # values at patch-j nodes
        mixed = torch.zeros(len(idx_j), layer.channels, dtype=torch.float64)
        for head in range(h):
            sl = slice(head * dk, (head + 1) * dk)
            s = torch.stack([(qf[:, sl] * kf[:, sl]).sum() / len(grid) for kf in ks]) * layer.scale
            p = torch.softmax(s, 0)
            for k, vf in enumerate(vs):
                mixed[:, sl] += p[k] * vf[:, sl]
        out[idx_j] = layer.out(mixed).detach()
    return out


@pytest.mark.parametrize("spectral_qkv", [False, True])
def test_equals_slow_reference(spectral_qkv):
    torch.manual_seed(0)
    data = from_meshio(families.unit_square(6, "irregular"), dtype=torch.float64)
    part = partition(data.pos, data.weight, 5, cells=data.cells)
    layer = PatchAttention(4, num_heads=2, modes=1, spectral_qkv=spectral_qkv).double()
    x = torch.randn(len(data.pos), 4, dtype=torch.float64)
    out = layer(x, data.pos, data.weight, patch=part.assignment, patch_length=part.length)
    expected = _slow(layer, x, data.pos, data.weight, part.assignment, part.length)
    assert torch.allclose(out, expected, atol=1e-10)


def test_cross_equals_slow_reference_on_two_meshes():
    """Query patches of mesh a attend to the source patches of mesh b (another partition, another
    number of patches); called with the source as its own query side it is self-attention."""
    torch.manual_seed(0)
    a = from_meshio(families.unit_square(5, "irregular"), dtype=torch.float64)
    b = from_meshio(families.unit_square(7, "graded"), dtype=torch.float64)
    part_a = partition(a.pos, a.weight, 3, cells=a.cells)
    part_b = partition(b.pos, b.weight, 4, method="rcb")
    length = max(part_a.length, part_b.length)
    layer = PatchAttention(2, num_heads=1, modes=1).double()
    xa, xb = torch.randn(len(a.pos), 2, dtype=torch.float64), torch.randn(len(b.pos), 2, dtype=torch.float64)
    out = layer(xb, b.pos, b.weight, patch=part_b.assignment, patch_length=length,
                x_query=xa, pos_query=a.pos, weight_query=a.weight, patch_query=part_a.assignment)
    assert out.shape == (len(a.pos), 2)
    expected = _slow(layer, xb, b.pos, b.weight, part_b.assignment, length,
                     xa, a.pos, a.weight, part_a.assignment)
    assert torch.allclose(out, expected, atol=1e-10)
    itself = layer(xb, b.pos, b.weight, patch=part_b.assignment, patch_length=length, x_query=xb,
                   pos_query=b.pos, weight_query=b.weight, patch_query=part_b.assignment)
    assert torch.equal(itself, layer(xb, b.pos, b.weight, patch=part_b.assignment,
                                     patch_length=length))


def test_cross_batch_equals_each_pair_alone():
    """A batch of two (query, source) pairs, with graph-wise patch counts given, equals each pair
    alone."""
    torch.manual_seed(0)
    layer = PatchAttention(4, num_heads=2, modes=1).double()
    pairs = []
    for nq, ns, seed in ((5, 6, 0), (4, 7, 1)):
        q = from_meshio(families.unit_square(nq, "irregular", seed=seed), dtype=torch.float64)
        s = from_meshio(families.unit_square(ns, "graded"), dtype=torch.float64)
        patch_q = partition(q.pos, q.weight, 3, method="rcb").assignment
        patch_s = partition(s.pos, s.weight, 4, method="rcb").assignment
        pairs.append(((torch.randn(len(s.pos), 4, dtype=torch.float64), s.pos, s.weight, patch_s),
                      (torch.randn(len(q.pos), 4, dtype=torch.float64), q.pos, q.weight, patch_q)))

    def call(source, query, batch=None, batch_query=None):
        (x, pos, w, patch), (xq, pq, wq, patch_q) = source, query
        return layer(x, pos, w, batch, patch=patch, patch_length=0.6, num_patches=4, x_query=xq,
                     pos_query=pq, weight_query=wq, patch_query=patch_q, batch_query=batch_query,
                     num_patches_query=3)

    alone = torch.cat([call(source, query) for source, query in pairs])
    source, query = ([torch.cat(t) for t in zip(*side)] for side in zip(*pairs))
    batch, batch_query = (torch.repeat_interleave(torch.tensor([len(p[k][0]) for p in pairs]))
                          for k in (0, 1))
    assert torch.allclose(call(source, query, batch, batch_query), alone, atol=1e-12)
    with pytest.raises(ValueError, match="give both batch and batch_query"):
        call(source, query, batch)
    with pytest.raises(ValueError, match="a query side needs"):
        layer(*source[:3], patch=source[3], x_query=query[0])


def test_batch_and_node_count_independence():
    """A batch of two graphs equals each alone; duplicating a node and splitting its weight, or
    permuting nodes, changes nothing (patch coefficients are quadratures)."""
    torch.manual_seed(0)
    layer = PatchAttention(4, num_heads=2, modes=2).double()
    graphs = []
    for n, seed in ((6, 0), (5, 1)):
        d = from_meshio(families.unit_square(n, "irregular", seed=seed), dtype=torch.float64)
        part = partition(d.pos, d.weight, 4, method="rcb")
        graphs.append((torch.randn(len(d.pos), 4, dtype=torch.float64), d.pos, d.weight, part.assignment))
    length = 0.8
    alone = torch.cat([layer(x, p, w, patch=pa, patch_length=length) for x, p, w, pa in graphs])
    batch = torch.repeat_interleave(torch.tensor([len(g[0]) for g in graphs]))
    x, p, w, pa = [torch.cat([g[k] for g in graphs]) for k in range(4)]
    assert torch.allclose(layer(x, p, w, batch, patch=pa, patch_length=length), alone, atol=1e-12)
    x, p, w, pa = graphs[0]
    fn = lambda x_, p_, w_, b_=None: layer(x_, p_, w_, b_, patch=_patch_of(p_, p, pa),
                                           patch_length=length)
    assert_permutation_equivariant(fn, x, p, w)
    assert_duplication_invariant(fn, x, p, w, 3)


def _patch_of(query, pos, patch):
    """Patch of each query point: the patch of the identical node of ``pos``."""
    return patch[torch.cdist(query, pos).argmin(1)]


def _u(pos):
    x, y = pos[:, 0], pos[:, 1]
    return torch.stack([torch.sin(math.pi * x) * torch.cos(math.pi * y), x**2 + y, torch.exp(x), x * y], 1)


@pytest.mark.parametrize("method", ["rcb", "metis"])
def test_converges_across_graded_mesh_and_refinements(method):
    """The same function on a graded mesh and its refinements, patches transferred from the
    coarsest mesh: outputs at the coarse nodes converge. Patch regions are fixed; the lumped
    quadrature of an integral over a region whose boundary cuts cells is first order, the interior
    second order: measured order about 1.7 (RCB boxes) and above 1 (METIS Voronoi regions)."""
    torch.manual_seed(0)
    layer = PatchAttention(4, num_heads=2, modes=2).double()
    mesh = families.unit_square(8, "graded")
    samples = refinement_samples(mesh, [0, 1, 2, 3, 4], _u)
    coarse = from_meshio(mesh, dtype=torch.float64)
    part = partition(coarse.pos, coarse.weight, 8, cells=coarse.cells, method=method)
    outs = []
    with torch.no_grad():
        for u, pos, w, _ in samples:
            outs.append(layer(u, pos, w, patch=part.transfer(pos),
                              patch_length=part.length)[:len(coarse.pos)])
    errors = [(o - outs[-1]).norm().item() / outs[-1].norm().item() for o in outs[:-1]]
    hs = [s[3] for s in samples[:-1]]
    if method == "rcb":
        assert_convergence_rate(hs, errors, expected=1.7, tol=0.3)
    else:  # pre-asymptotic on the coarsest level: fit the last three
        assert_convergence_rate(hs[1:], errors[1:], expected=1.3, tol=0.4)
    assert errors[-1] < 2.5e-2
    # plain averages over nodes (uniform weights) converge to another operator on a graded mesh
    u, pos, w, _ = samples[-1]
    with torch.no_grad():
        plain = layer(u, pos, torch.full_like(w, 1.0 / len(w)), patch=part.transfer(pos),
                      patch_length=part.length)
    assert (plain[:len(coarse.pos)] - outs[-1]).norm() / outs[-1].norm() > 10 * errors[-1]


def test_repr_and_errors():
    layer = PatchAttention(8, num_heads=2, modes=3, spectral_qkv=True)
    assert repr(layer).startswith(
        "PatchAttention(\n  8, num_heads=2, modes=3, dim=2, spectral_qkv=True\n")
    assert layer.head_channels == 4
    with pytest.raises(ValueError, match="multiple of num_heads"):
        PatchAttention(6, num_heads=4)


def test_float32():
    d = from_meshio(families.unit_square(6, "irregular"), dtype=torch.float32)
    part = partition(d.pos, d.weight, 4, cells=d.cells)
    layer = PatchAttention(4, num_heads=2, modes=2, spectral_qkv=True)
    out = layer(torch.randn(len(d.pos), 4), d.pos, d.weight, patch=part.assignment,
                patch_length=part.length)
    assert out.dtype == torch.float32 and torch.isfinite(out).all()
    out.sum().backward()
    assert layer.q.weight.grad is not None
