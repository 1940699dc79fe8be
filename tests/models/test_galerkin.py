import pytest
import torch

from geoattn.mesh import Mesh, families, from_meshio
from geoattn.models import GalerkinTransformer, build_model
from geoattn.models.encoder import EncoderBlock
from geoattn.nn import FourierAttention, SpectralIntegral
from geoattn.testing import convergence_rate


@pytest.mark.parametrize("attention", ["galerkin", "fourier"])
@torch.no_grad()
def test_untrained_galerkin_transformer_converges_under_refinement(attention):
    mesh = families.unit_square(4, "graded")
    levels = [from_meshio(families.refine(mesh, t) if t else mesh, dtype=torch.float64) for t in range(4)]
    torch.manual_seed(0)
    model = build_model("galerkin", in_channels=1, out_channels=1, width=16, depth=2,
                        attention=attention).double().eval()
    # the small initialisation of Galerkin attention hides the integral term; perturb the weights
    for p in model.parameters():
        p.add_(0.2 * torch.randn_like(p))
    outs = [model(torch.sin(3 * d.pos[:, :1]), Mesh(d.pos, d.weight)) for d in levels]
    n = levels[0].num_nodes
    errors = [float((o[:n] - outs[-1][:n]).abs().max()) for o in outs[:-1]]
    assert errors[0] > 1e-4
    assert convergence_rate([1, 0.5, 0.25], errors) > 1.6, errors
    assert model.hparams["attention"] == attention


@pytest.mark.parametrize("attention", ["galerkin", "fourier"])
def test_cross_decoder_answers_on_the_query_mesh(attention):
    torch.manual_seed(0)
    model = GalerkinTransformer(1, 1, dim=2, width=8, depth=1, num_heads=2, attention=attention,
                                decoder="cross")
    x, pos, w = torch.randn(30, 1), torch.rand(30, 2), torch.full((30,), 1 / 30)
    q = torch.rand(7, 2)
    assert model(x, Mesh(pos, w), query=Mesh(q, torch.full((7,), 1 / 7))).shape == (7, 1)
    # a batch of two graphs equals the graphs one by one, with query batches of other sizes
    x2, pos2, w2, q2 = torch.randn(20, 1), torch.rand(20, 2), torch.full((20,), 1 / 20), torch.rand(4, 2)
    meshes = [Mesh(pos, w), Mesh(pos2, w2)]
    queries = [Mesh(q, torch.full((7,), 1 / 7)), Mesh(q2, torch.full((4,), 1 / 4))]
    both = model(torch.cat([x, x2]), Mesh.batch(meshes), query=Mesh.batch(queries))
    torch.testing.assert_close(both, torch.cat([model(x, meshes[0], query=queries[0]),
                                                model(x2, meshes[1], query=queries[1])]))


# --- Cao's block as published (eq. 4), its regular-LayerNorm ablation (eq. 7), the post-LN
# block, and the spectral decoder. The references below are written from the formulas, with
# explicit matrices and quadrature sums, node by node.

import math

from smooth_inputs import smooth_input

from geoattn import testing
from geoattn.models.galerkin import CaoBlock, SpectralDecoder

# The references differ from the model only in the order of the float64 sums (loops over nodes
# and channels instead of batched matmuls). With ~20 nodes, 8 channels and O(1) values that
# rounding is a few eps (measured: up to 2e-15 on outputs of size 0.4-2); 1e-12 bounds it with
# a margin, while any misplaced term (a LayerNorm moved, a residual dropped) changes the output
# by more than 1e-1 here (test_layer_norm_in_the_wrong_place_does_not_match).
EXACT = dict(atol=1e-12, rtol=1e-12)


def _linear(lin, t):
    return t @ lin.weight.T + lin.bias


def _layer_norm(t, weight=None, bias=None, eps=1e-5):
    """LayerNorm over the last axis from its formula: (t - mean) / sqrt(var + eps) * a + b."""
    c = t - t.mean(-1, keepdim=True)
    t = c / torch.sqrt((c * c).mean(-1, keepdim=True) + eps)
    return t if weight is None else t * weight + bias


def _ffn(mlp, t):
    """The pointwise two-layer network Linear -> GELU -> Linear, GELU(s) = s Phi(s)."""
    s = _linear(mlp[0], t)
    return _linear(mlp[2], 0.5 * s * (1 + torch.erf(s / math.sqrt(2))))


def _attention(att, h, pos, w, normalized=None):
    """Cao's eqs. 5-6 with weights in place of 1/n, per head ``e``: Q, K, V = h W + b; LayerNorm
    per node on the tensors in ``normalized`` (default: the layer's own, K, V for Galerkin and
    Q, K for Fourier); coordinates in front; Galerkin z_i = q_i (sum_j w_j k_j^T v_j), Fourier
    z_i = sum_j w_j (q_i . k_j) v_j, as explicit sums over the nodes j."""
    normalized = att.normalized if normalized is None else normalized
    d, heads = att.head_channels, []
    for e in range(att.num_heads):
        t = {}
        for name in "qkv":
            lin = getattr(att, f"to_{name}")
            x = h @ lin.weight[e * d:(e + 1) * d].T + lin.bias[e * d:(e + 1) * d]
            if att.layer_norm and name in normalized:
                i = att.normalized.index(name) if name in att.normalized else 0
                x = _layer_norm(x, att.norm_weight[i, e], att.norm_bias[i, e], att.eps)
            t[name] = torch.cat([pos, x], 1) if att.dim else x
        q, k, v = t["q"], t["k"], t["v"]
        if isinstance(att, FourierAttention):
            z = torch.stack([sum(w[j] * (q[i] @ k[j]) * v[j] for j in range(len(w))) for i in range(len(q))])
        else:
            gram = sum(w[j] * torch.outer(k[j], v[j]) for j in range(len(w)))
            z = torch.stack([q[i] @ gram for i in range(len(q))])
        heads.append(z)
    return _linear(att.to_out, torch.cat(heads, 1))


def eq4(block, h, pos, w, **kw):
    """Cao's eq. 4: y~ = y + A(y), y -> y~ + g(y~)."""
    y = h + _attention(block.mixer, h, pos, w, **kw)
    return y + _ffn(block.ff, y)


def eq7(block, h, pos, w):
    """Cao's eq. 7 as printed: y -> Ln(y + A(y) + g(Ln(y + A(y)))), A without inner LayerNorm."""
    y = h + _attention(block.mixer, h, pos, w)
    n1, n2 = block.norm1, block.norm2
    return _layer_norm(y + _ffn(block.ff, _layer_norm(y, n1.weight, n1.bias)), n2.weight, n2.bias)


def postln(block, h, pos, w, norm1=None, norm2=None):
    """The post-LayerNorm block: g = Ln1(y + A(y)), y -> Ln2(g + F(g))."""
    n1, n2 = norm1 or block.norm1, norm2 or block.norm2
    g = _layer_norm(h + _attention(block.mixer, h, pos, w), n1.weight, n1.bias)
    return _layer_norm(g + _ffn(block.ff, g), n2.weight, n2.bias)


REFERENCES = {("cao", "attention"): eq4, ("cao", "regular"): eq7,
              ("postln", "attention"): postln, ("postln", "regular"): postln}


def _perturbed(model, scale=0.3, seed=0):
    """Move every parameter off its initial value (LayerNorm affine maps, the small diagonal
    initialisation of the attention) so a test sees each of them."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(scale * torch.randn(p.shape, generator=g, dtype=p.dtype))
    return model


def _small(seed=0, **kw):
    torch.manual_seed(seed)
    kw = {"width": 8, "depth": 2, "num_heads": 2, **kw}
    return _perturbed(GalerkinTransformer(2, 1, **kw).double())


def _graphs(sizes=(13, 9), seed=0):
    g = torch.Generator().manual_seed(seed)
    n = sum(sizes)
    pos = torch.rand(n, 2, generator=g, dtype=torch.float64)
    w = torch.rand(n, generator=g, dtype=torch.float64) / n
    w[4] = 0.0  # a padding node inside the first graph
    batch = torch.cat([torch.full((s,), i) for i, s in enumerate(sizes)])
    return smooth_input(pos), pos, w, batch


@pytest.mark.parametrize("attention", ["galerkin", "fourier"])
@pytest.mark.parametrize("block,norm", list(REFERENCES))
def test_blocks_match_the_papers_equations(attention, block, norm):
    """Each block of the model, and the whole model graph by graph, equal the reference of its
    equation (eq. 4, eq. 7, or the post-LN block) from explicit sums, with gradients."""
    model = _small(attention=attention, block=block, norm=norm)
    assert isinstance(model.blocks[0], CaoBlock if block == "cao" else EncoderBlock)
    assert model.blocks[0].mixer.layer_norm == (norm == "attention")
    assert model.hparams["block"] == block and model.hparams["norm"] == norm
    x, pos, w, batch = _graphs()
    x.requires_grad_(True)
    out = model(x, Mesh(pos, w, batch=batch))
    ref = []
    for g in range(2):
        i = batch == g
        h = model.lift(model.inputs(x[i], pos[i]))
        for blk in model.blocks:
            h = REFERENCES[block, norm](blk, h, pos[i], w[i])
        ref.append(model.project(h))
    params = [x] + [p for blk in model.blocks for p in blk.parameters() if p.numel()]
    testing.assert_matches_reference(out, torch.cat(ref), params, **EXACT)


@pytest.mark.parametrize("attention", ["galerkin", "fourier"])
def test_layer_norm_in_the_wrong_place_does_not_match(attention):
    """The references are sharp: Cao's block differs from each misplaced LayerNorm (outside the
    attention as post-LN, inside on the other pair of tensors, or none), and the post-LN block
    with the same attention differs from eq. 4."""
    x, pos, w, _ = _graphs((15,))
    cao = _small(attention=attention, block="cao", depth=1)
    post = _small(attention=attention, block="postln", depth=1)
    post.blocks[0].mixer.load_state_dict(cao.blocks[0].mixer.state_dict())
    post.blocks[0].ff.load_state_dict(cao.blocks[0].ff.state_dict())
    with torch.no_grad():
        h = cao.lift(cao.inputs(x, pos))
        right = eq4(cao.blocks[0], h, pos, w)
        torch.testing.assert_close(cao.blocks[0](h, pos, w), right, **EXACT)
        other = ("q", "v") if attention == "galerkin" else ("k", "v")
        wrong = {
            "post-LN outside": postln(post.blocks[0], h, pos, w),
            "LN on the other pair": eq4(cao.blocks[0], h, pos, w, normalized=other),
            "no LN": eq4(cao.blocks[0], h, pos, w, normalized=()),
            "post-LN model block": post.blocks[0](h, pos, w),
        }
        for what, value in wrong.items():
            gap = float((value - right).abs().max())
            assert gap > 1e-2, (what, gap)


def test_default_block_is_todays_and_old_checkpoints_rebuild_it():
    """Without the new arguments (a checkpoint written before them) the model is the post-LN
    block with attention-internal LayerNorm, with the same state-dict keys."""
    model = build_model("galerkin", in_channels=1, out_channels=1, width=8, depth=1, num_heads=2)
    assert (model.hparams["block"], model.hparams["norm"], model.hparams["decoder"]) == (
        "postln", "attention", "pointwise")
    old_kwargs = {k: v for k, v in model.hparams.items() if k not in ("block", "norm", "spectral")}
    again = build_model("galerkin", **old_kwargs)
    again.load_state_dict(model.state_dict())  # strict: the same modules
    assert isinstance(again.blocks[0], EncoderBlock) and again.blocks[0].mixer.layer_norm
    cao = GalerkinTransformer(1, 1, width=8, depth=1, num_heads=2, block="cao")
    assert not any("norm1" in k for k in cao.state_dict())
    with pytest.raises(ValueError, match="block must be one of"):
        GalerkinTransformer(1, 1, block="preln")
    with pytest.raises(ValueError, match="norm must be one of"):
        GalerkinTransformer(1, 1, norm="instance")
    with pytest.raises(ValueError, match="spectral= configures"):
        GalerkinTransformer(1, 1, spectral={"modes": 2})


VARIANTS = {
    "cao": {"block": "cao"},
    "cao_regular": {"block": "cao", "norm": "regular"},
    "postln_regular": {"norm": "regular"},
    "cao_fourier": {"block": "cao", "attention": "fourier"},
    "cao_spectral": {"block": "cao", "decoder": "spectral", "spectral": {"width": 6, "modes": 2}},
    "fourier_regular_spectral": {"block": "cao", "norm": "regular", "attention": "fourier",
                                 "decoder": "spectral", "spectral": {"width": 6, "modes": 2}},
}


@pytest.mark.parametrize("variant", VARIANTS)
def test_variants_pass_the_property_checks(variant):
    model = _small(**VARIANTS[variant]).eval()
    x, pos, w, batch = _graphs()
    with torch.no_grad():
        testing.assert_permutation_equivariant(testing.mesh_layer(model), x, pos, w, batch)
        testing.assert_padding_invariant(testing.mesh_layer(model), x, pos, w, batch)
        i = batch == 0
        testing.assert_duplication_invariant(testing.mesh_layer(model), x[i], pos[i], w[i], index=2)
        testing.assert_batch_independent(testing.mesh_layer(model), [(x[batch == g], pos[batch == g], w[batch == g])
                                                 for g in range(2)])


@pytest.mark.parametrize("variant", VARIANTS)
def test_variants_converge_under_refinement_and_rebuild_from_hparams(variant, two_meshes):
    model = _small(**VARIANTS[variant]).eval()
    testing.assert_model_converges(model, smooth_input, families.unit_square(4, "graded"))
    testing.assert_batched_equals_separate(model, two_meshes)


def test_spectral_decoder_is_fno_layers_of_the_spectral_integral():
    """decoder="spectral": z <- SiLU(W z + K z) twice with the quadrature spectral integral on
    the nodes (one shared Fourier basis changes nothing), then Linear -> SiLU -> Linear."""
    model = _small(block="cao", decoder="spectral", spectral={"width": 6, "modes": 3, "padding": 0.5})
    dec = model.spectral_decoder
    assert len(dec.spectral) == 2 and dec.spectral[0].modes == 3 and dec.spectral[0].padding == 0.5
    x, pos, w, batch = _graphs()
    with torch.no_grad():
        h = model.encode(x, Mesh(pos, w, batch=batch))
        z = h
        for k in range(2):
            z = torch.nn.functional.silu(_linear(dec.linears[k], z) + dec.spectral[k](z, pos, w, batch))
        lin1, lin2 = model.project[0], model.project[2]
        s = _linear(lin1, z)
        expected = _linear(lin2, s / (1 + torch.exp(-s)))
        torch.testing.assert_close(model(x, Mesh(pos, w, batch=batch)), expected, **EXACT)
    with pytest.raises(ValueError, match="answers on its input mesh"):
        model(x, Mesh(pos, w, batch=batch), query=Mesh(pos, w, batch=batch))
    with pytest.raises(ValueError, match="depth >= 1"):
        SpectralDecoder(8, 2, depth=0)


@pytest.mark.skipif("period" not in __import__("inspect").signature(SpectralIntegral).parameters,
                    reason="SpectralIntegral has no period= yet")
def test_spectral_decoder_passes_the_period_on():
    """On a declared periodic domain (Cao's Burgers problem) the decoder's layers take the period
    and no padding, so the decoder commutes with a rotation of the periodic grid."""
    model = _small(dim=1, decoder="spectral", spectral={"width": 6, "modes": 3, "period": 1.0})
    decoder = model.spectral_decoder
    assert all(s.period == (1.0,) and s.padding == 0.0 for s in decoder.spectral)
    pos = torch.arange(16, dtype=torch.float64)[:, None] / 16
    w = torch.full((16,), 1 / 16, dtype=torch.float64)
    h = torch.randn(16, 8, dtype=torch.float64)
    with torch.no_grad():
        torch.testing.assert_close(decoder(h.roll(3, 0), pos, w), decoder(h, pos, w).roll(3, 0),
                                   atol=1e-12, rtol=1e-12)


@pytest.mark.parametrize("block", ["cao", "postln"])
def test_feed_forward_dropout_is_cao_s_and_leaves_evaluation_and_keys_alone(block):
    """``ff_dropout`` drops the hidden units of every block's feed-forward network in training
    mode. With the second layer summing hidden units j and j + 8 into output j, each output is
    (m_1 h_j + m_2 h_(j+8)) / (1 - p) for one mask pair m in {0, 1}^2 (dropout on the output
    would allow only m_1 = m_2), and the share of dropped units is p (1536 draws of a
    Bernoulli(0.25): standard deviation 0.011, the bound 0.06 is over 5 of them). In evaluation
    mode and in its state-dict keys the model is the one without dropout."""
    p = 0.25
    with_drop = GalerkinTransformer(2, 1, width=8, depth=2, num_heads=2, block=block, ff_dropout=p)
    plain = GalerkinTransformer(2, 1, width=8, depth=2, num_heads=2, block=block)
    assert with_drop.state_dict().keys() == plain.state_dict().keys()
    plain.load_state_dict(with_drop.state_dict())  # strict
    x, pos, w, batch = _graphs()
    x, pos, w = x.float(), pos.float(), w.float()
    with_drop.eval()
    plain.eval()
    torch.testing.assert_close(with_drop(x, Mesh(pos, w, batch=batch)), plain(x, Mesh(pos, w, batch=batch)), rtol=0, atol=0)
    ff = with_drop.blocks[0].ff
    assert ff.dropout == p and "dropout=0.25" in repr(ff)
    ff.train()
    with torch.no_grad():
        ff[2].weight.copy_(torch.cat([torch.eye(8), torch.eye(8)], dim=1))
        ff[2].bias.zero_()
        torch.manual_seed(0)
        out = ff(torch.randn(96, 8))
        torch.manual_seed(0)
        h = ff[1](ff[0](torch.randn(96, 8)))
    masks = torch.tensor([[0, 0], [0, 1], [1, 0], [1, 1]], dtype=h.dtype)  # (m_1, m_2)
    candidates = (masks[:, 0, None, None] * h[:, :8] + masks[:, 1, None, None] * h[:, 8:]) / (1 - p)
    gap, which = (candidates - out).abs().min(0)  # the mask pair of each output entry
    assert float(gap.max()) < 1e-5, float(gap.max())
    assert abs(float(1 - masks[which].mean()) - p) < 0.06
    single = (masks[which].sum(-1) == 1).double().mean()  # 2 p (1 - p) = 0.375 expected
    assert abs(float(single) - 2 * p * (1 - p)) < 0.08
    with pytest.raises(ValueError, match="dropout must be in"):
        GalerkinTransformer(1, 1, ff_dropout=1.0)
