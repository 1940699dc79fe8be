"""The property checks are sharp: each one rejects a layer that violates its property."""

import numpy as np
import pytest
import torch

from geoattn import testing
from geoattn.mesh import integrate


def weighted_mean_layer(x, pos, w, batch=None):
    """Each node's output is the weighted domain mean of x: has every property."""
    b = None if batch is None else int(batch.max()) + 1
    mean = integrate(x, w, batch, b) / integrate(torch.ones_like(w), w, batch, b)[..., None]
    return mean.expand_as(x) if batch is None else mean[batch]


def plain_mean_layer(x, pos, w, batch=None):
    """Node mean that ignores the weights: sees padding and duplicated nodes."""
    return weighted_mean_layer(x, pos, torch.ones_like(w), batch)


def position_layer(x, pos, w, batch=None):
    """Depends on the node numbering: not permutation equivariant."""
    return x + torch.arange(len(x), dtype=x.dtype)[:, None]


def global_layer(x, pos, w, batch=None):
    """Mixes graphs of a batch."""
    return weighted_mean_layer(x, pos, w)


@pytest.fixture
def sample():
    n = 12
    batch = torch.tensor([0] * 5 + [1] * 7)
    return (torch.randn(n, 3, dtype=torch.float64), torch.rand(n, 2, dtype=torch.float64),
            torch.rand(n, dtype=torch.float64) + 0.1, batch)


def test_weighted_mean_passes_every_check(sample):
    x, pos, w, batch = sample
    testing.assert_permutation_equivariant(weighted_mean_layer, x, pos, w, batch)
    testing.assert_padding_invariant(weighted_mean_layer, x, pos, w, batch)
    testing.assert_batch_independent(weighted_mean_layer, [(x[:5], pos[:5], w[:5]),
                                                           (x[5:], pos[5:], w[5:])])
    testing.assert_duplication_invariant(weighted_mean_layer, x, pos, w, index=3)


def test_checks_reject_layers_without_the_property(sample):
    x, pos, w, batch = sample
    with pytest.raises(AssertionError, match="permutation equivariance"):
        testing.assert_permutation_equivariant(position_layer, x, pos, w, batch)
    with pytest.raises(AssertionError, match="padding invariance"):
        testing.assert_padding_invariant(plain_mean_layer, x, pos, w, batch)
    with pytest.raises(AssertionError, match="node duplication invariance"):
        testing.assert_duplication_invariant(plain_mean_layer, x, pos, w, index=3)
    with pytest.raises(AssertionError, match="batch independence"):
        testing.assert_batch_independent(global_layer, [(x[:5], pos[:5], w[:5]),
                                                        (x[5:], pos[5:], w[5:])])


def test_convergence_rate_fits_the_order():
    h = 2.0 ** -np.arange(1, 6)
    assert testing.convergence_rate(h, 3.0 * h**2) == pytest.approx(2.0, abs=1e-12)
    assert testing.assert_convergence_rate(h, 0.5 * h**1.5, 1.5, tol=1e-9) == pytest.approx(1.5)
    with pytest.raises(AssertionError, match="convergence rate 1.000"):
        testing.assert_convergence_rate(h, h, 2.0)


def test_refinement_samples_keep_coarse_nodes_first():
    from geoattn.mesh import families

    mesh = families.unit_square(2, "graded")
    samples = testing.refinement_samples(mesh, [0, 2], lambda p: p[:, :1] ** 2)
    (x0, p0, w0, h0), (x2, p2, w2, h2) = samples
    assert (h0, h2) == (1.0, 0.25) and len(p2) == 81
    torch.testing.assert_close(p2[:len(p0)], p0)
    torch.testing.assert_close(x2, p2[:, :1] ** 2)
    torch.testing.assert_close(w2.sum(), torch.tensor(1.0, dtype=torch.float64))


class _Unchecked(torch.nn.Module):
    """Accepts any input: a model that forgot to validate."""

    dim, in_channels = 2, 1

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(1, 1)

    def forward(self, x, mesh):
        return x[:, :1]


def test_rejects_mismatched_inputs_catches_a_model_that_checks_nothing():
    with pytest.raises(AssertionError, match="accepted 3-D coordinates"):
        testing.assert_rejects_mismatched_inputs(_Unchecked())


def test_matches_reference_checks_values_and_gradients():
    x = torch.rand(5, dtype=torch.float64, requires_grad=True) + 0.5
    testing.assert_matches_reference(x * x, x ** 2, [x])
    with pytest.raises(AssertionError, match="^reference: max deviation"):
        testing.assert_matches_reference(x * x, x ** 2 + 1e-9, [x])
    with pytest.raises(AssertionError, match="reference gradient of input 0"):
        testing.assert_matches_reference(x * x, (x * x).detach() + 3 * (x - x.detach()), [x])


class _Mean(torch.nn.Module):
    """A registered-looking model: weighted mean of x over the nodes, ignoring or using batch."""

    model_name, hparams = "tno", {}

    def __init__(self, weighted=True, use_batch=True):
        super().__init__()
        self.scale = torch.nn.Parameter(torch.ones((), dtype=torch.float64))
        self.weighted, self.use_batch = weighted, use_batch

    def forward(self, x, mesh):
        weight, batch = mesh.weight, mesh.batch_vector
        w = weight if self.weighted else torch.ones_like(weight)
        b = batch if self.use_batch and batch is not None else torch.zeros(len(x), dtype=torch.long)
        mean = integrate(x, w, b) / integrate(torch.ones_like(w), w, b)[:, None]
        return self.scale * mean[b]


def test_model_convergence_check_tells_weighted_from_node_average():
    from geoattn.mesh import families

    def f(pos):
        return torch.exp(pos[:, :1])

    graded = families.unit_square(4, "graded")
    assert testing.assert_model_converges(_Mean(), f, graded) > 1.6
    with pytest.raises(AssertionError, match="fitted order"):
        testing.assert_model_converges(_Mean(weighted=False), f, graded)


def test_batched_equals_separate_catches_a_model_that_mixes_graphs():
    from torch_geometric.data import Data

    samples = [Data(x=torch.rand(n, 1, dtype=torch.float64), pos=torch.rand(n, 2, dtype=torch.float64),
                    weight=torch.rand(n, dtype=torch.float64) + 0.1) for n in (4, 7)]
    with pytest.raises(AssertionError, match="batch vs alone"):
        testing.assert_batched_equals_separate(_Mean(use_batch=False), samples)
