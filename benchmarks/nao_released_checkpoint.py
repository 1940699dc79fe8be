"""The NAO authors' released radial-kernel model, scored on this library's radial data.

The authors publish their trained sine-only models (``best_model_dk{10,20,40}_sinonly_synthetic.ckpt``
in their repository) but not, in a form that can be read back, the data they were trained on. A
released model that reproduces its paper's errors on our data would show that our data and metric
are the paper's, and would put the whole gap of our own training in the training. This script
evaluates such a checkpoint with an independent implementation of the forward pass the authors'
radial code describes:

- inputs normalised by one global mean and standard deviation each for the loadings and the
  responses of the training samples (their Gaussian normaliser; the prediction is decoded back);
- one hidden layer ``V <- b + (M - mean_tokens M) * s + V`` with ``M = h A V``,
  ``A = Q K^T / sqrt(d_k)``, where ``s`` and ``b`` are coordinate networks on the u-tokens and the
  scalars ``gamma`` and ``beta`` on the f-token, and ``h = 2 / (N - 1)`` (the spacing of
  ``linspace(-1, 1, N)``, the networks' input);
- the kernel ``K_c(r_g) = h sum_a W(r_a) A(a, g) + kappa A(f, g)`` from the last layer's attention,
  applied to the normalised raw loadings: ``f_n = h sum_g K_c(r_g) g_n(r_g)``.

Three scalars (``kappa`` = W^{P,f}, ``gamma``, ``beta``) are not in the released state dicts: in the
code of the paper's time they were built with ``Parameter(...).double()``, which is not a
parameter, so they stayed at their random initial values. They are replayed here from the script's
seed (``--seed``), or fitted to the training samples (``--fit-constants``).

Run: ``python benchmarks/nao_released_checkpoint.py --checkpoint best_model_dk10_sinonly_synthetic.ckpt``
(seconds).
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from pathlib import Path

import torch
from torch import nn

from geoattn.nao import (RadialKernelProblem, RadialSamples, kernel_error, ood1_kernel, operator_error,
                         radial_density, sine_kernel)
from results_page import add_docs_argument, write_page
from timing import machine

#: Table 1 (sine-only training, d = 302), NAO: E_f and E_K by d_k
PAPER = {10: {"ID": (0.0148, 0.0540), "OOD1": (0.0810, 0.1002)},
         20: {"ID": (0.0133, 0.0463), "OOD1": (0.0912, 0.0914)},
         40: {"ID": (0.0067, 0.0403), "OOD1": (0.0734, 0.1216)}}
NETWORKS = ("kernel", "fnw", "fnb")


def _network() -> nn.Sequential:
    """The authors' coordinate network: 1 -> 32 -> 64 -> 1 with LeakyReLU."""
    return nn.Sequential(nn.Linear(1, 32), nn.LeakyReLU(), nn.Linear(32, 64), nn.LeakyReLU(),
                         nn.Linear(64, 1)).double()


def replayed_constants(seed: int) -> tuple[float, float, float]:
    """``(kappa, gamma, beta)`` as the authors' constructor draws them after ``manual_seed(seed)``:
    the W^P network, ``kappa``, the two normaliser networks, ``gamma``, ``beta``."""
    torch.manual_seed(seed)
    _network()
    kappa = float(torch.randn(1))
    _network(), _network()
    gamma, beta = float(torch.randn(1)), float(torch.randn(1))
    return kappa, gamma, beta


class ReleasedNAO(nn.Module):
    """The released radial model: its state dict, three constants and the training normaliser
    ``(mean_u, std_u, mean_f, std_f)``; :meth:`forward` returns the prediction in physical units
    and the kernel ``K`` with ``f ~ sum_g dr K(r_g) g[u](r_g) + c``."""

    def __init__(self, state: dict, constants: tuple[float, float, float], normaliser: tuple):
        super().__init__()
        self.nets = nn.ModuleDict({name: _network() for name in NETWORKS})
        for name, net in self.nets.items():
            net.load_state_dict({k[len(name) + 8:]: v.double() for k, v in state.items()
                                 if k.startswith(name + ".layers.")})
        self.layers = sum(k.startswith("fcq_") and k.endswith(".weight") for k in state)
        self.maps = {k: v.double() for k, v in state.items() if k.startswith(("fcq_", "fck_"))}
        self.constants = nn.Parameter(torch.tensor(constants, dtype=torch.float64))
        self.dk = self.maps["fcq_0_0.weight"].shape[0]
        self.normaliser = normaliser

    def _attention(self, layer: int, v: torch.Tensor) -> torch.Tensor:
        q = v @ self.maps[f"fcq_{layer}_0.weight"].T + self.maps[f"fcq_{layer}_0.bias"]
        k = v @ self.maps[f"fck_{layer}_0.weight"].T + self.maps[f"fck_{layer}_0.bias"]
        return q @ k.transpose(1, 2) / math.sqrt(self.dk)

    def forward(self, s: RadialSamples) -> tuple[torch.Tensor, torch.Tensor]:
        mu_u, sd_u, mu_f, sd_f = self.normaliser
        n = s.u.shape[1]
        grid = torch.linspace(-1, 1, n, dtype=torch.float64)[:, None]
        h = 2 / (n - 1)
        kappa, gamma, beta = self.constants
        x = torch.cat([(s.u - mu_u) / sd_u, (s.f - mu_f) / sd_f], 1)  # (S, N + 1, d)
        scale = torch.cat([self.nets["fnw"](grid)[:, 0], gamma[None]])[:, None]
        shift = torch.cat([self.nets["fnb"](grid)[:, 0], beta[None]])[:, None]
        v = x
        for layer in range(self.layers - 1):
            m = h * self._attention(layer, v) @ v
            v = shift + (m - m.mean(1, keepdim=True)) * scale + v
        a = self._attention(self.layers - 1, v)
        kc = h * torch.einsum("a,sag->sg", self.nets["kernel"](grid)[:, 0], a[:, :n, :n]) + kappa * a[:, n, :n]
        pred = h * torch.einsum("sg,sgd->sd", kc, x[:, :n]) * sd_f + mu_f
        return pred[:, None], kc * (sd_f / sd_u) * (h / s.mesh.weight[0])


def score(model: ReleasedNAO, s: RadialSamples) -> dict:
    pred, K = model(s)
    ef = operator_error(pred, s.f, s.mesh_query.weight)
    ek = kernel_error(K[:, None], s.kernel[None, None], s.mesh_query.weight, s.mesh.weight, radial_density(s.u))
    return {"E_f": float(ef.mean()), "E_K": float(ek.mean())}


def fit_constants(model: ReleasedNAO, train: list[RadialSamples]) -> None:
    """The three constants that minimise the mean training E_f (L-BFGS from their start)."""
    opt = torch.optim.LBFGS([model.constants], max_iter=200, line_search_fn="strong_wolfe")

    def closure():
        opt.zero_grad()
        loss = sum(operator_error(model(s)[0], s.f, s.mesh_query.weight).mean() for s in train) / len(train)
        loss.backward()
        return loss

    opt.step(closure)


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--checkpoint", type=Path, required=True,
                   help="a released sine-only state dict, e.g. best_model_dk10_sinonly_synthetic.ckpt")
    p.add_argument("--seed", type=int, default=0, help="the training script's seed (replays the constants)")
    p.add_argument("--fit-constants", action="store_true",
                   help="also score with the three constants fitted to the training samples")
    add_docs_argument(p)
    args = p.parse_args(argv)
    if not args.checkpoint.is_file():
        p.error(f"--checkpoint {args.checkpoint}: no such file")
    state = torch.load(args.checkpoint, weights_only=True, map_location="cpu")
    missing = [k for k in ("kernel.layers.0.weight", "fnw.layers.0.weight", "fcq_0_0.weight") if k not in state]
    if missing:
        p.error(f"--checkpoint {args.checkpoint}: not a released radial NAO state dict (no {', '.join(missing)})")
    tic = time.perf_counter()
    prob = RadialKernelProblem(dx=0.0125)
    d = state["fcq_0_0.weight"].shape[1]
    train = [prob.samples(sine_kernel(eta), d) for eta in (1, 2, 3, 4, 6, 7, 8)]
    splits = {"train": train, "ID": [prob.samples(sine_kernel(5.0), d)], "OOD1": [prob.samples(ood1_kernel, d)]}
    u, f = torch.cat([s.u for s in train]), torch.cat([s.f for s in train])
    eps = 1e-5  # the normaliser's
    model = ReleasedNAO(state, replayed_constants(args.seed),
                        (u.mean(), u.std() + eps, f.mean(), f.std() + eps))
    dk = model.dk
    rows = {}
    variants = [("constants replayed from seed %d" % args.seed, None)]
    if args.fit_constants:
        variants.append(("constants fitted to the training samples", fit_constants))
    for name, prepare in variants:
        if prepare is not None:
            prepare(model, train)
        with torch.no_grad():
            scores = {split: [score(model, s) for s in ss] for split, ss in splits.items()}
        rows[name] = {split: {k: sum(x[k] for x in v) / len(v) for k in ("E_f", "E_K")} for split, v in scores.items()}
        rows[name]["constants"] = model.constants.detach().tolist()
    paper = PAPER.get(dk, {})
    lines = ["| model | split | E_f | E_K | paper E_f | paper E_K |", "|---|---|---|---|---|---|"]
    for name, r in rows.items():
        for split in splits:
            pe = paper.get(split, (None, None))
            cell = lambda v: "-" if v is None else f"{100 * v:.3g} %"  # noqa: E731
            lines.append(f"| released d_k = {dk}, {name} | {split} | {cell(r[split]['E_f'])} | "
                         f"{cell(r[split]['E_K'])} | {cell(pe[0])} | {cell(pe[1])} |")
    table = "\n".join(lines)
    print(table)
    print(f"({time.perf_counter() - tic:.0f} s; constants: "
          + "; ".join(f"{k}: {', '.join(f'{c:.3f}' for c in r['constants'])}" for k, r in rows.items()) + ")")
    if args.docs:
        write_page(args.docs, "The NAO authors' released radial model on our data (`benchmarks/nao_released_checkpoint.py`)",
                   " ".join(["python", "benchmarks/nao_released_checkpoint.py", *(sys.argv[1:] if argv is None else argv)]),
                   table, f"{machine(torch.device('cpu'))}, load average (1 min) {os.getloadavg()[0]:.1f}; "
                   f"recorded {time.strftime('%Y-%m-%d')}")
    return rows


if __name__ == "__main__":
    main()
