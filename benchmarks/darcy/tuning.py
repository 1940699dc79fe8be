"""FNO tuned as a careful user would: the best of a few (modes, width) configurations, picked on a
validation split of the training samples.

:func:`split` holds out the last ``holdout`` fraction of the training samples (at least one, at
least one left to fit on; the samples' order is the race's, so the split is deterministic);
:func:`select_peer` trains one :class:`darcy.peers.GridFNO` per candidate on the rest through
:func:`darcy.race.run_family` (the race's training path, with its ``peer`` override), scores it
on the held-out samples with the race's metric (the quadrature-weighted relative L2 error), and
returns the candidate with the lowest error, every candidate's record beside it. The selection's
training time is its own: it is not part of any model's budget in the race. Candidates with more
modes than the grid resolves (``modes > s // 2`` on an ``s x s`` grid) are skipped and recorded as
such. With ``cache``, the result is kept in ``cache/peer-<family>-<key>.json`` and reread when the
domain, family, scale (its settings other than their defaults), budget, candidates, split, seed
and training samples are the same.
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import asdict, fields, replace
from pathlib import Path

import torch

from .race import Scale, peer_configuration, run_family

log = logging.getLogger("darcy_compare")

PEER = "neuralop-fno"


def split(samples: list, holdout: float = 0.2) -> tuple[list, list]:
    """``(fit, validation)``: the ``n`` samples but the last ``h = round(holdout * n)`` (at least 1,
    at most ``n - 1``), and those last ``h``."""
    if not 0.0 < holdout < 1.0:
        raise ValueError(f"holdout must be in (0, 1), got {holdout!r}")
    if len(samples) < 2:
        raise ValueError(f"a validation split needs at least 2 training samples, got {len(samples)}")
    held = min(len(samples) - 1, max(1, round(holdout * len(samples))))
    return list(samples[:-held]), list(samples[-held:])


def _fingerprint(samples: list) -> list:
    """The training samples in a few numbers (count, nodes, sums of inputs and targets), so that a
    cached selection is not reread for other data."""
    return [len(samples), sum(int(d.num_nodes) for d in samples),
            round(float(sum(d.x.double().sum() for d in samples)), 9),
            round(float(sum(d.y.double().sum() for d in samples)), 9)]


def select_peer(data: dict, scale: Scale, domain: str, seconds: float | None,
                modes: tuple[int, ...] = (8, 12, 16), widths: tuple[int, ...] = (32, 64),
                holdout: float = 0.2, seed: int = 0, device: torch.device = torch.device("cpu"),
                family: str = "", cache: Path | None = None) -> dict:
    """The FNO configuration of lowest validation error among ``modes x widths``.

    ``data``: the samples of :func:`darcy.race.race_data` (only ``data["train"]`` is used, split by
    :func:`split`); ``seconds``: training time per candidate (``None``: ``scale.epochs`` epochs);
    ``family`` names the samples' coefficient law in the cache's key. Every candidate is the race's
    peer (:func:`darcy.race.peer_configuration`: its grid, depth and mask) with its own modes and
    width, trained alone (no ensemble, no early stopping) with ``seed``.

    Returns ``{"best": {grid, modes, width, depth, domain}, "candidates": [...], "key": {...}}``;
    each candidate holds its ``modes``, ``width`` and either its ``val_error`` (the mean over the
    held-out samples), ``train_error`` (the trainer's last epoch's loss), ``epochs`` and
    ``train_seconds``, or why it was ``skipped``.
    """
    fit, val = split(data["train"], holdout)
    base = peer_configuration(scale, domain)
    # each candidate as the race trains a model: alone, for the budget, no validation samples (and
    # no refined copies of the samples: only geoattn's models train on those)
    budget = replace(scale, seconds=seconds, epochs=scale.epochs if seconds is None else 10**6,
                     ensemble=1, validation=0, symmetries=False, refine_data=False)
    # the scale's settings that differ from its defaults: a setting the race gains later, at its
    # default, leaves a kept selection valid
    defaults = {f.name: f.default for f in fields(Scale)}
    settings = {k: v for k, v in asdict(budget).items() if v != defaults[k]}
    key = {"domain": domain, "family": family, "scale": settings, "seconds": seconds,
           "modes": list(modes), "widths": list(widths), "holdout": holdout, "seed": seed,
           "data": _fingerprint(data["train"])}
    path = None
    if cache is not None:
        digest = hashlib.sha1(json.dumps(key, sort_keys=True).encode()).hexdigest()[:12]
        path = Path(cache) / f"peer-{family or domain}-{digest}.json"
        if path.exists():
            kept = json.loads(path.read_text())
            if kept["key"] == key:
                return kept
    # the held-out samples are run_family's test set, named twice (it reports every mesh against "train")
    samples = {"train": fit, "test": {"train": val, "validation": val}, "val": None, "refined": None}
    candidates, s = [], base["grid"]
    for m in modes:
        for w in widths:
            if m > s // 2:
                skipped = f"modes above s // 2 = {s // 2} of the {s}-point grid"
                candidates.append({"modes": m, "width": w, "skipped": skipped})
                continue
            peer = dict(base, modes=m, width=w)
            result = run_family(family, budget, [PEER], device, seed=seed, domain=domain, data=samples, peer=peer)
            if PEER not in result["models"]:
                candidates.append({"modes": m, "width": w, "skipped": result["failed"].get(PEER, "failed")})
                continue
            row = result["models"][PEER]
            candidates.append({"modes": m, "width": w, "val_error": row["test"]["validation"],
                               "train_error": row["train_error"], "epochs": row["epochs"],
                               "train_seconds": row["train_seconds"]})
            log.info("%s: FNO modes %d width %d: validation %.4f", family, m, w, candidates[-1]["val_error"])
    scored = [c for c in candidates if "val_error" in c]
    if not scored:
        raise ValueError(f"no FNO candidate of modes {modes} x widths {widths} could be trained on the "
                         f"{s}-point grid: {candidates}")
    best = min(scored, key=lambda c: c["val_error"])
    out = {"best": dict(base, modes=best["modes"], width=best["width"]), "candidates": candidates, "key": key,
           "fit_samples": len(fit), "val_samples": len(val)}
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(out, indent=1))
    return out
