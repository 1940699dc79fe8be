r"""Property checks for layers that discretise continuum operators.

Each check states a mathematical property of a layer with the common signature
``layer(x, pos, weight, batch=None) -> [N, C]`` and raises ``AssertionError`` with the measured
deviation when it fails, so a test is one line (a model, called ``model(x, mesh)``, is checked
as the layer :func:`mesh_layer` ``(model)``):

- :func:`assert_permutation_equivariant`: renumbering nodes renumbers the outputs;
- :func:`assert_batch_independent`: a graph's output does not depend on the other graphs in its
  batch;
- :func:`assert_padding_invariant`: extra nodes of weight 0 change no other output;
- :func:`assert_duplication_invariant`: duplicating a node and splitting its weight in half
  changes no output (the quadrature sees the same measure);
- :func:`assert_matches_reference`: a layer's output and its gradients equal those of a slow,
  obvious reference implementation;
- :func:`refinement_samples` samples one function on uniform refinements of a mesh, and
  :func:`convergence_rate` / :func:`assert_convergence_rate` fit the order :math:`p` of a
  cross-mesh convergence study, :math:`e(h) \approx C h^p`; :func:`differences_to_finest`
  measures an operator's outputs against those on the finest mesh and fits the order;
- :func:`assert_rejects_mismatched_inputs`: a model refuses coordinates of the wrong dimension
  and inputs with the wrong number of channels, with its typed errors;
- :func:`assert_model_converges`: an (untrained) model's output for one continuum input
  converges under uniform refinement of a mesh at a fitted order;
- :func:`assert_batched_equals_separate`: a model gives each graph of a batch its own output, and
  a copy rebuilt from its name and ``hparams`` gives the same numbers.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

import numpy as np
import torch

__all__ = [
    "assert_batch_independent",
    "assert_batched_equals_separate",
    "assert_convergence_rate",
    "assert_duplication_invariant",
    "assert_matches_reference",
    "assert_model_converges",
    "assert_padding_invariant",
    "assert_permutation_equivariant",
    "assert_rejects_mismatched_inputs",
    "convergence_rate",
    "differences_to_finest",
    "mesh_layer",
    "refinement_samples",
]

Layer = Callable[..., torch.Tensor]


def mesh_layer(model: torch.nn.Module) -> Layer:
    """``model`` (called ``model(x, mesh)``) as a layer ``(x, pos, weight, batch=None)``: each
    call makes a new :class:`~geoattn.mesh.Mesh` of its tensors, for the property checks here."""
    from .mesh.mesh import Mesh

    def layer(x: torch.Tensor, pos: torch.Tensor, weight: torch.Tensor,
              batch: torch.Tensor | None = None) -> torch.Tensor:
        return model(x, Mesh(pos, weight, batch=batch))

    return layer


def _assert_close(actual: torch.Tensor, expected: torch.Tensor, what: str, atol: float,
                  rtol: float) -> None:
    if not torch.allclose(actual, expected, atol=atol, rtol=rtol):
        err = (actual - expected).abs().max().item()
        raise AssertionError(f"{what}: max deviation {err:.3e} (atol={atol}, rtol={rtol})")


def _tolerances(x: torch.Tensor, atol: float | None, rtol: float | None) -> tuple[float, float]:
    eps = torch.finfo(x.dtype).eps
    return (atol if atol is not None else 1e3 * eps, rtol if rtol is not None else 1e3 * eps)


def assert_permutation_equivariant(layer: Layer, x: torch.Tensor, pos: torch.Tensor,
                                   weight: torch.Tensor, batch: torch.Tensor | None = None, *,
                                   generator: torch.Generator | None = None,
                                   atol: float | None = None, rtol: float | None = None) -> None:
    """``layer(P x, P pos, P w) == P layer(x, pos, w)`` for a random node permutation ``P``.

    With ``batch`` the permutation shuffles nodes within each graph, so the batch stays sorted.
    """
    atol, rtol = _tolerances(x, atol, rtol)
    keys = torch.rand(x.shape[0], generator=generator).to(x.device)
    if batch is not None:
        keys = keys + batch.to(keys.dtype) * 2.0  # graphs stay in order, nodes shuffle inside
    perm = torch.argsort(keys)
    out = layer(x, pos, weight, batch)
    out_perm = layer(x[perm], pos[perm], weight[perm], None if batch is None else batch[perm])
    _assert_close(out_perm, out[perm], "permutation equivariance", atol, rtol)


def assert_batch_independent(layer: Layer, samples: Sequence[tuple[torch.Tensor, ...]], *,
                             atol: float | None = None, rtol: float | None = None) -> None:
    """Outputs on a batch of ``(x, pos, weight)`` samples equal the outputs of each sample alone."""
    xs, poss, ws = zip(*samples)
    atol, rtol = _tolerances(xs[0], atol, rtol)
    batch = torch.cat([torch.full((x.shape[0],), i, dtype=torch.long, device=x.device)
                       for i, x in enumerate(xs)])
    out = layer(torch.cat(xs), torch.cat(poss), torch.cat(ws), batch)
    alone = torch.cat([layer(x, p, w) for x, p, w in samples])
    _assert_close(out, alone, "batch independence", atol, rtol)


def assert_padding_invariant(layer: Layer, x: torch.Tensor, pos: torch.Tensor,
                             weight: torch.Tensor, batch: torch.Tensor | None = None,
                             num_pad: int = 3, *, generator: torch.Generator | None = None,
                             atol: float | None = None, rtol: float | None = None) -> None:
    """Appending ``num_pad`` random nodes of weight 0 to every graph leaves all other outputs
    unchanged."""
    atol, rtol = _tolerances(x, atol, rtol)
    if batch is None:
        batch = torch.zeros(x.shape[0], dtype=torch.long, device=x.device)
    b = int(batch.max()) + 1
    pad_batch = torch.arange(b, device=x.device).repeat_interleave(num_pad)
    n_pad = pad_batch.shape[0]
    pad_x = torch.randn(n_pad, *x.shape[1:], generator=generator).to(x)
    pad_pos = torch.rand(n_pad, *pos.shape[1:], generator=generator).to(pos)
    order = torch.argsort(torch.cat([batch, pad_batch]), stable=True)
    padded = [torch.cat(pair)[order] for pair in
              ((x, pad_x), (pos, pad_pos), (weight, weight.new_zeros(n_pad)),
               (batch, pad_batch))]
    out = layer(*padded)
    is_real = torch.cat([torch.ones_like(batch, dtype=torch.bool),
                         torch.zeros_like(pad_batch, dtype=torch.bool)])[order]
    _assert_close(out[is_real], layer(x, pos, weight, batch), "padding invariance", atol, rtol)


def assert_duplication_invariant(layer: Layer, x: torch.Tensor, pos: torch.Tensor,
                                 weight: torch.Tensor, index: int, *,
                                 atol: float | None = None, rtol: float | None = None) -> None:
    """Duplicating node ``index`` (appended last) and giving each copy half its weight changes
    no output; the copy's output equals the original node's."""
    atol, rtol = _tolerances(x, atol, rtol)
    w2 = weight.clone()
    w2[index] = weight[index] / 2
    out = layer(x, pos, weight)
    out2 = layer(torch.cat([x, x[index:index + 1]]), torch.cat([pos, pos[index:index + 1]]),
                 torch.cat([w2, w2[index:index + 1]]))
    _assert_close(out2, torch.cat([out, out[index:index + 1]]), "node duplication invariance",
                  atol, rtol)


def assert_matches_reference(actual: torch.Tensor, expected: torch.Tensor,
                             inputs: Sequence[torch.Tensor], *,
                             generator: torch.Generator | None = None,
                             atol: float | None = None, rtol: float | None = None,
                             grad_atol: float | None = None,
                             grad_rtol: float | None = None) -> None:
    r"""``actual`` (a layer's output) equals ``expected`` (a slow reference computed from the same
    ``inputs``), and so do their gradients with respect to every tensor of ``inputs``.

    The gradients are those of the random projection :math:`\langle r, \mathrm{out} \rangle`,
    i.e. one vector-Jacobian product of each computation with the same random ``r``. The gradient
    tolerances default to the output tolerances.
    """
    atol, rtol = _tolerances(actual, atol, rtol)
    grad_atol = atol if grad_atol is None else grad_atol
    grad_rtol = rtol if grad_rtol is None else grad_rtol
    _assert_close(actual, expected, "reference", atol, rtol)
    r = torch.randn(actual.shape, generator=generator, dtype=actual.dtype).to(actual.device)
    inputs = list(inputs)
    grads = torch.autograd.grad((actual * r).sum(), inputs)
    grads_ref = torch.autograd.grad((expected * r).sum(), inputs)
    for i, (g, g_ref) in enumerate(zip(grads, grads_ref)):
        _assert_close(g, g_ref, f"reference gradient of input {i}", grad_atol, grad_rtol)


def refinement_samples(mesh, times: Sequence[int],
                       function: Callable[[torch.Tensor], torch.Tensor],
                       dtype: torch.dtype = torch.float64) -> list[tuple[torch.Tensor, ...]]:
    """``(x, pos, weight, h)`` of ``function(pos)`` on ``refine(mesh, t)`` for each ``t``.

    Red refinement keeps the nodes of the coarser mesh first and in order, so node ``i`` of the
    unrefined mesh is node ``i`` of every refinement. ``h`` is the mesh size relative to the
    unrefined mesh, ``2**-t``; weights are lumped P1/Q1 mass.
    """
    from .mesh import families, from_meshio

    samples = []
    for t in times:
        data = from_meshio(families.refine(mesh, t) if t else mesh, dtype=dtype)
        samples.append((function(data.pos), data.pos, data.weight, 2.0**-t))
    return samples


def differences_to_finest(outputs: Sequence[torch.Tensor], samples: Sequence[tuple[torch.Tensor, ...]],
                          skip: int = 0, log: logging.Logger | None = None) -> dict[str, float]:
    """Relative differences of ``outputs[:-1]`` to ``outputs[-1]`` and the order fitted to them.

    ``outputs`` are one operator's values at the coarse nodes on each of ``samples`` (from
    :func:`refinement_samples`); the order is fitted to the levels from ``skip`` on. Returns
    ``rate``, ``first_error`` and ``final_error``; logs each level to ``log`` when given.
    """
    errors = [float((o - outputs[-1]).norm() / outputs[-1].norm()) for o in outputs[:-1]]
    h = [s[3] for s in samples[:-1]]
    result = {"rate": convergence_rate(h[skip:], errors[skip:]), "first_error": errors[0],
              "final_error": errors[-1]}
    if log is not None:
        for level, err in enumerate(errors):
            log.info("level %d: %d nodes, relative difference to the finest %.3e", level,
                     len(samples[level][1]), err)
        log.info("fitted order %.2f", result["rate"])
    return result


def convergence_rate(h: Sequence[float], errors: Sequence[float]) -> float:
    """Least-squares slope :math:`p` of :math:`\\log e` against :math:`\\log h`."""
    return float(np.polyfit(np.log(np.asarray(h, float)), np.log(np.asarray(errors, float)), 1)[0])


def assert_convergence_rate(h: Sequence[float], errors: Sequence[float], expected: float,
                            tol: float = 0.3) -> float:
    """The fitted order is within ``tol`` of ``expected``; returns the fitted order."""
    rate = convergence_rate(h, errors)
    if abs(rate - expected) > tol:
        raise AssertionError(f"convergence rate {rate:.3f}, expected {expected} +- {tol} "
                             f"(h={list(h)}, errors={list(errors)})")
    return rate


def assert_rejects_mismatched_inputs(model: torch.nn.Module, num_nodes: int = 5) -> None:
    """Check that ``model(x, mesh)`` rejects a mesh of another dimension and a field with
    another number of channels than the model was built for (``model.dim``,
    ``model.in_channels``), raising :class:`~geoattn.errors.DimensionError` and
    :class:`~geoattn.errors.ChannelError` whose messages name what was expected."""
    from .errors import ChannelError, DimensionError
    from .mesh.mesh import Mesh

    dim, channels = model.dim, model.in_channels
    p = next(model.parameters())

    def zeros(*shape):
        return torch.zeros(*shape, dtype=p.dtype, device=p.device)

    weight = zeros(num_nodes) + 1.0 / num_nodes
    wrong_dim = dim + 1 if dim < 3 else 2
    try:
        model(zeros(num_nodes, channels), Mesh(zeros(num_nodes, wrong_dim), weight))
    except DimensionError as err:
        assert f"built for {dim}-D" in str(err), f"DimensionError does not name {dim}-D: {err}"
    else:
        raise AssertionError(f"{type(model).__name__} accepted {wrong_dim}-D coordinates")
    try:
        model(zeros(num_nodes, channels + 1), Mesh(zeros(num_nodes, dim), weight))
    except ChannelError as err:
        assert f"expects {channels} input channel" in str(err), f"ChannelError does not name {channels}: {err}"
    else:
        raise AssertionError(f"{type(model).__name__} accepted {channels + 1} input channels")


@torch.no_grad()
def assert_model_converges(model: torch.nn.Module, function: Callable[[torch.Tensor], torch.Tensor],
                           mesh, times: Sequence[int] = (0, 1, 2, 3), order: float = 1.6) -> float:
    """Check that ``model``'s output for ``function`` sampled on uniform refinements of ``mesh``
    converges at the nodes of ``mesh`` (kept first by red refinement) at a fitted order of at
    least ``order``, against the finest level (max norm; float64). Returns the fitted order.
    The model is called ``model(x, mesh)`` with each level's :class:`~geoattn.mesh.Mesh`, cells
    included."""
    from .mesh import families, from_meshio
    from .mesh.mesh import Mesh

    levels = [Mesh.from_sample(from_meshio(families.refine(mesh, t) if t else mesh, dtype=torch.float64))
              for t in times]
    samples = [(function(m.pos), m.pos, m.weight, 2.0**-t) for m, t in zip(levels, times)]
    n = len(samples[0][1])
    outs = [model(x, m)[:n] for (x, *_), m in zip(samples, levels)]
    errors = [float((o - outs[-1]).abs().max()) for o in outs[:-1]]
    rate = convergence_rate([s[3] for s in samples[:-1]], errors)
    if not rate >= order:
        raise AssertionError(f"fitted order {rate:.2f} < {order} (errors {errors})")
    return rate


@torch.no_grad()
def assert_batched_equals_separate(model: torch.nn.Module, samples: Sequence, atol: float = 1e-12) -> None:
    """Check that ``model`` on the batch of ``samples`` (each with ``x``, ``pos``, ``weight``,
    optionally ``cells``), ``model(x, Mesh.batch(meshes))``, equals the model on each sample
    alone, ``model(x, mesh)``, and that the model rebuilt from ``model.model_name`` and
    ``model.hparams`` with the same state gives identical outputs."""
    from .mesh.mesh import Mesh
    from .models import build_model

    samples = list(samples)
    meshes = [Mesh.from_sample(d) for d in samples]
    alone = torch.cat([model(d.x, m) for d, m in zip(samples, meshes)])
    batched = model(torch.cat([d.x for d in samples]), Mesh.batch(meshes))
    _assert_close(batched, alone, "batch vs alone", atol, 0.0)
    p = next(model.parameters())
    again = build_model(model.model_name, **model.hparams).to(p.dtype)
    again.load_state_dict(model.state_dict())
    again.train(model.training)
    d, m = samples[0], meshes[0]
    if not torch.equal(again(d.x, m), model(d.x, m)):
        raise AssertionError(f"{type(model).__name__} rebuilt from its hparams gives other outputs")
