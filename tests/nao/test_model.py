import math

import pytest
import torch

from geoattn.errors import MeshMismatchError
from geoattn.mesh import families
from geoattn.models import MODELS
from geoattn.nao import NAO, DiscreteNAO, TokenMesh
from geoattn.testing import assert_convergence_rate, refinement_samples


def reference_kernel(model, u, f, pos, w, pos_f, wf):
    """Eq. (7)/(15) term by term: attention layers as explicit matrices, W^P(x, z) one pair at a
    time, K = sum_z W^{P,u}(x,z) w_z A_uu(z,y) + sum_z W^{P,f}(x,z) wf_z A_fu(z,y)."""
    X, wt = torch.cat([u, f]), torch.cat([w, wf])
    for i, block in enumerate(model.blocks):
        q, k = block.query(X), block.key(X)
        M = (q @ k.T / math.sqrt(block.head_channels)) @ (wt[:, None] * X)
        if model.norms is not None:  # TokenNorm: b(x) + (M - mean) s(x) on u, beta + (M - mean) gamma on f
            norm = model.norms[i]
            M = M - (wt[:, None] * M).sum(0) / wt.sum()
            for a in range(len(u)):
                M[a] = norm.shift(pos[a:a + 1])[0] + M[a] * norm.scale(pos[a:a + 1])[0]
            M[len(u):] = norm.beta + M[len(u):] * norm.gamma
        X = X + M
    U, F = X[:len(u)], X[len(u):]
    att = model.kernel_attention
    WQK = lambda A, B: att.query(A) @ att.key(B).T / math.sqrt(att.head_channels)  # noqa: E731
    A_uu, A_fu = WQK(U, U), WQK(F, U)
    K = torch.zeros(len(f), len(u), dtype=u.dtype)
    for i in range(len(f)):
        for z in range(len(u)):
            K[i] += model.mixer_u(pos_f[None, i:i + 1], pos[None, z:z + 1])[0, 0, 0] * w[z] * A_uu[z]
        for z in range(len(f)):
            K[i] += model.mixer_f(pos_f[None, i:i + 1], pos_f[None, z:z + 1])[0, 0, 0] * wf[z] * A_fu[z]
    return K


def _system(n, nf, d=4, seed=0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(n, d, generator=g, dtype=dtype), torch.randn(nf, d, generator=g, dtype=dtype),
            torch.rand(n, 2, generator=g, dtype=dtype), torch.rand(n, generator=g, dtype=dtype),
            torch.rand(nf, 2, generator=g, dtype=dtype), torch.rand(nf, generator=g, dtype=dtype))


def perturbed(model):
    """``model`` with its normalisers (if any) moved off their start (s = 1, b = 0, gamma = 1,
    beta = 0): random last layers and scalars, so that every term of TokenNorm is tested."""
    g = torch.Generator().manual_seed(11)
    with torch.no_grad():
        for norm in model.norms or ():
            for net in (norm.scale, norm.shift):
                last = net.net[-1]
                last.weight.copy_(0.3 * torch.randn(last.weight.shape, generator=g, dtype=last.weight.dtype))
            norm.gamma.fill_(0.7)
            norm.beta.fill_(-0.2)
    return model


@pytest.mark.parametrize("token_norm", [False, True])
@pytest.mark.parametrize("layers", [1, 2, 3])
def test_kernel_and_prediction_equal_the_dense_reference(layers, token_norm):
    torch.manual_seed(0)
    model = perturbed(NAO(4, dim=2, head_channels=3, layers=layers, token_norm=token_norm).double())
    systems = [_system(9, 5, seed=1), _system(6, 7, seed=2)]
    u, f, pos, w, pos_f, wf = (torch.cat(t) for t in zip(*systems))
    batch = torch.repeat_interleave(torch.arange(2), torch.tensor([9, 6]))
    batch_f = torch.repeat_interleave(torch.arange(2), torch.tensor([5, 7]))
    query = dict(x_query=f, pos_query=pos_f, weight_query=wf, batch_query=batch_f)
    K = model.kernel(u, pos, w, batch, **query)
    pred = model(u, pos, w, batch, **query)
    preds = []
    for b, s in enumerate(systems):
        Kref = reference_kernel(model, *s)
        torch.testing.assert_close(K[b, :len(s[1]), :len(s[0])], Kref, atol=1e-11, rtol=1e-10)
        assert K[b, len(s[1]):].abs().sum() == 0 and K[b, :, len(s[0]):].abs().sum() == 0
        preds.append(Kref @ (s[3][:, None] * s[0]))  # f~(x_i) = sum_k w_k K(x_i, y_k) g(y_k)
    torch.testing.assert_close(pred, torch.cat(preds), atol=1e-11, rtol=1e-10)


def test_uniform_weights_give_the_paper_riemann_sums():
    """App. A: output = dx^2 * W^P A g on a uniform grid with the paper's attention layers."""
    torch.manual_seed(1)
    model = NAO(3, dim=2, head_channels=2, layers=2, bias=False).double()
    n, dx = 16, 0.25
    g1 = torch.arange(4, dtype=torch.float64) * dx
    pos = torch.cartesian_prod(g1, g1)
    u, f = torch.randn(n, 3, dtype=torch.float64), torch.randn(n, 3, dtype=torch.float64)
    w = torch.full((n,), dx**2, dtype=torch.float64)
    X = torch.cat([u, f])
    blk = model.blocks[0]
    WQK = blk.query.weight.T @ blk.key.weight / math.sqrt(2)
    X = X + dx**2 * (X @ WQK @ X.T) @ X
    U, F = X[:n], X[n:]
    att = model.kernel_attention
    WQK = att.query.weight.T @ att.key.weight / math.sqrt(2)
    WPu, WPf = model.mixer_u(pos[None], pos[None])[0], model.mixer_f(pos[None], pos[None])[0]
    out = dx**2 * dx**2 * (WPu @ (U @ WQK @ U.T) + WPf @ (F @ WQK @ U.T)) @ u
    torch.testing.assert_close(model(u, pos, w, x_query=f), out, atol=1e-12, rtol=1e-12)


def test_flat_call_equals_the_dense_methods_on_token_meshes():
    """forward/kernel on flat tensors and forward_dense/kernel_dense on TokenMesh.of meshes are
    the same operator (one system, different u- and f-meshes; the f-mesh defaults to the u-mesh)."""
    torch.manual_seed(6)
    model = NAO(4, dim=2, head_channels=3).double()
    u, f, pos, w, pos_f, wf = _system(9, 5, seed=7)
    mesh, mesh_query = TokenMesh.of(pos, w), TokenMesh.of(pos_f, wf)
    assert mesh.pos.shape == (1, 9, 2) and mesh.weight.shape == (1, 9)
    query = dict(x_query=f, pos_query=pos_f, weight_query=wf)
    torch.testing.assert_close(model(u, pos, w, **query),
                               model.forward_dense(u[None], f[None], mesh, mesh_query)[0])
    torch.testing.assert_close(model.kernel(u, pos, w, **query),
                               model.kernel_dense(u[None], f[None], mesh, mesh_query))
    f_u = torch.randn(9, 4, dtype=torch.float64)
    torch.testing.assert_close(model(u, pos, w, x_query=f_u),
                               model.forward_dense(u[None], f_u[None], mesh)[0])
    with pytest.raises(ValueError, match="weight_query"):
        model(u, pos, w, x_query=f, pos_query=pos_f)


@pytest.mark.parametrize("token_norm", [False, True])
def test_kernel_converges_under_mesh_refinement(token_norm):
    """Fixed continuum data on refinements of an irregular mesh: the kernel K(x_i, y_k) at the
    coarse nodes converges at order 2 (lumped P1 quadrature in every integral, the normaliser's
    token mean included)."""
    torch.manual_seed(2)
    model = perturbed(NAO(3, dim=2, head_channels=2, token_norm=token_norm).double())

    def fields(p):
        j = torch.arange(1, 4, dtype=p.dtype)
        return torch.cat([torch.sin(j * p[:, :1] + p[:, 1:]), torch.cos(j * p[:, 1:]) * p[:, :1]], 1)

    samples = refinement_samples(families.unit_square(4, kind="irregular", seed=3), [0, 1, 2, 3], fields)
    n0 = len(samples[0][1])
    Ks = []
    with torch.no_grad():
        for x, pos, w, _ in samples:
            Ks.append(model.kernel(x[:, :3], pos, w, x_query=x[:, 3:])[0, :n0, :n0])
    errors = [float((K - Ks[-1]).norm() / Ks[-1].norm()) for K in Ks[:-1]]
    assert_convergence_rate([s[3] for s in samples[:-1]], errors, expected=2.0, tol=0.35)


def test_rebuild_from_hparams_and_float32():
    """NAO is not a registered field-to-field model, but its hparams rebuild it."""
    assert "nao" not in MODELS and "discrete_nao" not in MODELS
    model = NAO(4, dim=2, head_channels=3, coord_scale=2.0)
    clone = NAO(**model.hparams)
    clone.load_state_dict(model.state_dict())
    u, f, pos, w, _, _ = _system(10, 10, dtype=torch.float32)
    torch.testing.assert_close(clone(u, pos, w, x_query=f), model(u, pos, w, x_query=f))
    assert model(u, pos, w, x_query=f).dtype == torch.float32


def test_node_permutation_permutes_kernel_and_prediction():
    torch.manual_seed(4)
    model = NAO(4, dim=2, head_channels=3).double()
    u, f, pos, w, _, _ = _system(12, 12, seed=5)
    perm = torch.randperm(12)
    K = model.kernel(u, pos, w, x_query=f)[0]
    Kp = model.kernel(u[perm], pos[perm], w[perm], x_query=f[perm])[0]
    torch.testing.assert_close(Kp, K[perm][:, perm])


def test_discrete_nao_is_tied_to_its_mesh():
    u, f, pos, w, _, _ = _system(10, 10)
    model = DiscreteNAO(4, num_nodes=10, head_channels=3).double()
    with pytest.raises(MeshMismatchError, match="bind_mesh"):
        model(u, pos, w, x_query=f)
    model.bind_mesh(pos)
    assert model(u, pos, w, x_query=f).shape == (10, 4)
    clone = DiscreteNAO(**model.hparams).double()
    clone.load_state_dict(model.state_dict())  # the mesh travels with the checkpoint
    assert "mesh_pos_query" in model.state_dict()
    torch.testing.assert_close(clone(u, pos, w, x_query=f), model(u, pos, w, x_query=f))
    with pytest.raises(MeshMismatchError, match="training u-mesh"):
        model(u, pos + 0.01, w, x_query=f)
    with pytest.raises(MeshMismatchError, match="NAO"):
        model(u[:8], pos[:8], w[:8], x_query=f[:8])


def test_token_norm_starts_as_the_centred_update_and_counts_the_authors_parameters():
    """At initialisation TokenNorm returns the update minus its quadrature mean over all tokens
    (s = 1, b = 0, gamma = 1, beta = 0); an L = 2 model with it has the authors' 2 x 2241
    normaliser parameters (DenseNet [1, 32, 64, 1] twice) plus gamma and beta."""
    from geoattn.nao import TokenNorm

    g = torch.Generator().manual_seed(4)
    m = torch.randn(2, 7, 3, generator=g, dtype=torch.float64)
    w = torch.rand(2, 7, generator=g, dtype=torch.float64)
    pos = torch.rand(1, 5, 1, generator=g, dtype=torch.float64)  # 5 u-tokens, 2 f-tokens
    out = TokenNorm(1).double()(m, w, pos)
    mean = (w[..., None] * m).sum(1, keepdim=True) / w.sum(1)[:, None, None]
    torch.testing.assert_close(out, m - mean, atol=1e-14, rtol=0)
    plain, normed = NAO(302, dim=1, head_channels=10), NAO(302, dim=1, head_channels=10, token_norm=True)
    count = lambda model: sum(p.numel() for p in model.parameters())  # noqa: E731
    assert count(normed) - count(plain) == 2 * 2241 + 2
