"""Gaussian random fields conditioned on point values (exact, Matheron's rule) and on point signs
(exact Hamiltonian Monte Carlo and elliptical slice sampling), against the closed-form conditional
laws and against exact rejection sampling."""

import math

import numpy as np
import pytest

from geoattn.data.grf import GaussianRandomField
from problems.conditional import SignConditionedField, ValueConditionedField


def _field(modes=16):
    return GaussianRandomField(alpha=2.0, tau=3.0, modes=modes)


def test_value_draws_take_the_values_at_the_points_and_vary_elsewhere():
    field = _field()
    pts = np.random.default_rng(0).uniform(0, 1, (20, 2))
    truth = field.sample(0, 3)
    cond = ValueConditionedField(field, pts, truth(pts))
    rng = np.random.default_rng(1)
    draws = [cond.sample(rng) for _ in range(4)]
    scale = np.abs(truth(pts)).max()
    for d in draws + [cond.mean()]:
        np.testing.assert_allclose(d(pts), truth(pts), atol=1e-6 * scale)
    far = np.array([[0.05, 0.95], [0.97, 0.5]])
    spread = np.std([d(far) for d in draws], axis=0)
    assert np.all(spread > 1e-3 * scale)  # away from the points the draws differ


def test_value_conditioning_is_kriging():
    """Mean C(y,X) C(X,X)^-1 v and covariance C(y,y) - C(y,X) C(X,X)^-1 C(X,y) at new points,
    computed from the field's covariance, against 4000 draws."""
    field = _field()
    x = np.array([[0.2, 0.3], [0.7, 0.6], [0.4, 0.9], [0.9, 0.1], [0.5, 0.5]])
    y = np.array([[0.3, 0.35], [0.6, 0.8], [0.1, 0.9]])
    v = field.sample(0, 7)(x)
    cond = ValueConditionedField(field, x, v)
    kxx, kyx, kyy = field.covariance(x, x), field.covariance(y, x), field.covariance(y, y)
    mean = kyx @ np.linalg.solve(kxx, v)
    cov = kyy - kyx @ np.linalg.solve(kxx, kyx.T)
    np.testing.assert_allclose(cond.mean()(y), mean, rtol=1e-7, atol=1e-9)
    rng, n = np.random.default_rng(2), 4000
    dev = np.stack([cond.sample(rng)(y) for _ in range(n)]) - mean  # [n, 3]
    emp = dev.T @ dev / n
    se = np.sqrt((np.outer(np.diag(cov), np.diag(cov)) + cov**2) / n)
    assert np.all(np.abs(emp - cov) < 4.5 * se), (emp - cov) / se
    assert np.all(np.abs(dev.mean(0)) < 4.5 * np.sqrt(np.diag(cov) / n))
    assert np.all(np.diag(cov) < 0.9 * np.diag(kyy))  # the values explain part of the variance


def test_value_conditioning_collapses_when_the_points_determine_the_field():
    field = _field(modes=3)  # 8 non-constant modes, 30 generic points
    pts = np.random.default_rng(3).uniform(0, 1, (30, 2))
    truth = field.sample(1, 0)
    cond = ValueConditionedField(field, pts, truth(pts))
    new = np.random.default_rng(4).uniform(0, 1, (50, 2))
    rng = np.random.default_rng(5)
    for _ in range(3):
        np.testing.assert_allclose(cond.sample(rng)(new), truth(new), atol=1e-5 * np.abs(truth(new)).max())


def _batch_se(values: np.ndarray, batches: int = 10) -> float:
    """Standard error of a chain's mean from the means of consecutive batches."""
    means = values[: len(values) // batches * batches].reshape(batches, -1).mean(1)
    return float(means.std(ddof=1) / math.sqrt(batches))


def _sign_draws(cond, sampler, rng, n):
    if sampler == "hmc":
        return list(cond.hmc(rng, n, burn=10))
    return list(cond.chain(rng, n, burn=100, thin=3))


@pytest.mark.parametrize("sampler", ["hmc", "slice"])
def test_sign_chain_matches_the_truncated_gaussian(sampler):
    """One positive sign at x0: g(x0) is half-normal, E = s sqrt(2/pi), and g(y) has the mean
    C(y,x0) / C(x0,x0) E[g(x0)] (the Gaussian regression of g(y) on g(x0))."""
    field = _field()
    x0, y = np.array([[0.3, 0.6]]), np.array([[0.35, 0.55], [0.8, 0.2]])
    start = next(s for s in (field.sample(0, i) for i in range(100)) if s(x0)[0] >= 0)
    cond = SignConditionedField(field, x0, start)
    draws = _sign_draws(cond, sampler, np.random.default_rng(6), 3000)
    g0 = np.array([d(x0)[0] for d in draws])
    gy = np.array([d(y) for d in draws])
    assert np.all(g0 >= 0)
    s0 = math.sqrt(field.covariance(x0, x0)[0, 0])
    e0 = s0 * math.sqrt(2 / math.pi)
    ey = field.covariance(y, x0)[:, 0] / s0**2 * e0
    assert abs(g0.mean() - e0) < 4 * _batch_se(g0), (g0.mean(), e0, _batch_se(g0))
    for k in range(2):
        assert abs(gy[:, k].mean() - ey[k]) < 4 * _batch_se(gy[:, k]), (gy[:, k].mean(), ey[k])


@pytest.mark.parametrize("sampler", ["hmc", "slice"])
def test_sign_chains_match_rejection_sampling(sampler):
    """Five signs of a coarse field: the exact conditional law is the prior's draws that have them
    (rejection, about 4 % accepted). Both chains must give its first two moments of g at three
    other points, to four standard errors (batch means for the chains)."""
    field = GaussianRandomField(alpha=2.0, tau=3.0, modes=4)
    pts = np.random.default_rng(1).uniform(0, 1, (5, 2))
    truth = field.sample(0, 3)
    ys = np.array([[0.5, 0.5], [0.1, 0.9], [0.7, 0.3]])
    prior = np.random.default_rng(0).standard_normal((200_000, field.std.size)) * field.std.ravel()
    kept = prior[((prior @ field.basis(pts).T >= 0) == (truth(pts) >= 0)).all(1)] @ field.basis(ys).T
    assert len(kept) > 5000
    draws = np.array([d(ys) for d in _sign_draws(SignConditionedField(field, pts, truth), sampler,
                                                 np.random.default_rng(2), 8000)])
    for moment in (1, 2):
        for k in range(3):
            exact, got = kept[:, k] ** moment, draws[:, k] ** moment
            se = math.hypot(exact.std() / math.sqrt(len(exact)), _batch_se(got))
            assert abs(got.mean() - exact.mean()) < 4 * se, (moment, k, got.mean(), exact.mean(), se)


def test_hmc_draws_are_nearly_independent_where_slice_sampling_is_not():
    """200 signs: consecutive exact-HMC draws are nearly uncorrelated; the slice chain's, with 10
    moves between them, are not (what makes its floor estimates disagree on large meshes)."""
    field = _field()
    pts = np.random.default_rng(3).uniform(0, 1, (200, 2))
    cond = SignConditionedField(field, pts, field.sample(1, 4))
    ys = np.random.default_rng(4).uniform(0, 1, (50, 2))

    def lag_one(draws):
        x = np.array([d(ys) for d in draws])
        x = x - x.mean(0)
        return float(np.mean((x[1:] * x[:-1]).sum(0) / (x**2).sum(0)))

    assert abs(lag_one(cond.hmc(np.random.default_rng(5), 300))) < 0.25
    assert lag_one(cond.chain(np.random.default_rng(5), 300, burn=50, thin=10)) > 0.5


@pytest.mark.parametrize("sampler", ["hmc", "slice"])
def test_sign_chain_keeps_every_sign_and_moves(sampler):
    field = _field()
    pts = np.random.default_rng(7).uniform(0, 1, (40, 2))
    truth = field.sample(2, 1)
    cond = SignConditionedField(field, pts, truth)
    draws = list(cond.hmc(np.random.default_rng(8), 5, burn=2) if sampler == "hmc"
                 else cond.chain(np.random.default_rng(8), 5, burn=50, thin=10))
    assert len(draws) == 5
    for d in draws:
        np.testing.assert_array_equal(d(pts) >= 0, truth(pts) >= 0)
    assert not np.allclose(draws[-1].coefficients, truth.coefficients)


def test_bad_inputs_are_refused():
    field = _field()
    pts = np.array([[0.1, 0.1], [0.9, 0.9]])
    with pytest.raises(ValueError, match="values must be 2"):
        ValueConditionedField(field, pts, [1.0])
    with pytest.raises(ValueError, match="points must be"):
        ValueConditionedField(field, pts[:, :1], [1.0, 2.0])
    truth = field.sample(0, 0)
    with pytest.raises(ValueError, match="does not have the observed signs"):
        SignConditionedField(field, pts, truth, signs=~(truth(pts) >= 0))
    with pytest.raises(ValueError, match="thin"):
        next(SignConditionedField(field, pts, truth).chain(np.random.default_rng(0), 1, thin=0))
    with pytest.raises(ValueError, match="travel"):
        next(SignConditionedField(field, pts, truth).hmc(np.random.default_rng(0), 1, travel=0.0))
