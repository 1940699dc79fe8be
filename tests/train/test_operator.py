import torch
from torch import nn

from geoattn.mesh import Mesh, families, from_meshio, integrate
from geoattn.train import NormalizedOperator


class WeightRecorder(nn.Module):
    """A tiny field-to-field model that integrates its input, and records the weights it got."""

    def __init__(self, in_channels: int = 1, out_channels: int = 2, dim: int = 2):
        super().__init__()
        self.in_channels, self.out_channels, self.dim = in_channels, out_channels, dim
        self.lift = nn.Linear(in_channels + dim, out_channels, dtype=torch.float64)
        self.checked, self.weights = 0, []

    def check_inputs(self, x, pos):
        self.checked += 1

    def forward(self, x, mesh):
        pos, weight, batch = mesh.pos, mesh.weight, mesh.batch_vector
        self.weights.append(weight)
        if batch is None:
            batch = torch.zeros(len(x), dtype=torch.long)
        mean = integrate(x, weight, batch) / integrate(torch.ones_like(weight), weight, batch)[:, None]
        return self.lift(torch.cat([x, pos], 1)) + mean[batch].sum(1, keepdim=True)


def _samples(n_samples=3):
    base = from_meshio(families.unit_square(6, "graded"), dtype=torch.float64)
    out = []
    for k in range(n_samples):
        d = base.clone()
        d.x = 2.0 + k + torch.sin(3 * d.pos[:, :1])
        d.y = torch.cat([d.x * d.pos[:, 1:], 5 - d.x], 1)
        out.append(d)
    return out


def _statistics(values, weights):
    """Pooled weighted mean and standard deviation per channel, from the formula."""
    total = sum(w.sum() for w in weights)
    mean = sum((w[:, None] * v).sum(0) for v, w in zip(values, weights)) / total
    var = sum((w[:, None] * (v - mean) ** 2).sum(0) for v, w in zip(values, weights)) / total
    return mean, var.sqrt()


def test_identity_normalisers_before_fitting():
    model = WeightRecorder()
    op = NormalizedOperator(model)
    d = _samples(1)[0]
    out = op(d.x, Mesh(d.pos, d.weight))
    torch.testing.assert_close(out, model(d.x, Mesh(d.pos, d.weight)), rtol=1e-5, atol=1e-8)
    assert model.checked == 1
    assert model.weights[0] is d.weight


def test_fitted_operator_is_decode_model_encode():
    samples = _samples()
    model = WeightRecorder()
    op = NormalizedOperator(model)
    op.x_normalizer.fit((d.x, d.weight) for d in samples)
    op.y_normalizer.fit((d.y, d.weight) for d in samples)
    weights = [d.weight for d in samples]
    mx, sx = _statistics([d.x for d in samples], weights)
    my, sy = _statistics([d.y for d in samples], weights)
    eps = op.x_normalizer.eps
    d = samples[1]
    expected = model((d.x - mx) / (sx + eps), Mesh(d.pos, d.weight)) * (sy + eps) + my
    torch.testing.assert_close(op(d.x, Mesh(d.pos, d.weight)), expected)
    # the statistics are not trivial, so a missing encode or decode would show
    assert (mx.abs() > 1).all() and ((sy - 1).abs() > 0.1).all()


def test_unweighted_feeds_node_average_weights():
    samples = _samples(2)
    samples[1] = from_meshio(families.unit_square(4, "irregular"), dtype=torch.float64)
    samples[1].x = samples[1].pos[:, :1]
    weight = torch.cat([d.weight for d in samples])
    batch = torch.cat([torch.full((d.num_nodes,), b) for b, d in enumerate(samples)])
    x = torch.cat([d.x for d in samples])
    pos = torch.cat([d.pos for d in samples])

    model = WeightRecorder()
    NormalizedOperator(model, unweighted=True)(x, Mesh(pos, weight, batch=batch))
    seen = model.weights[-1]
    for b, d in enumerate(samples):  # |D_b| / N_b on every node of graph b; both areas are 1
        torch.testing.assert_close(seen[batch == b], torch.full_like(d.weight, 1.0 / d.num_nodes))
    assert not torch.allclose(seen, weight)  # the graded mesh's own weights are far from uniform

    NormalizedOperator(model)(x, Mesh(pos, weight, batch=batch))
    assert model.weights[-1] is weight
