"""Both Darcy races of issue 53 on one lent GPU, inside a deadline: the square and the per-sample
domains (``random_holes``), geoattn's ``multigrid`` and ``mesh_fno`` against neuralop's FNO
through a masked grid, every model in its own process, all at once on the device.

    bash benchmarks/darcy_races_gpu.sh OUT_DIR DEADLINE_SECONDS            # the GPU run
    SCALE=tiny bash benchmarks/darcy_races_gpu.sh OUT_DIR 60                # its smoke test
    python benchmarks/darcy_gpu_races.py --out OUT_DIR --deadline 420 [--scale race-gpu]
        [--device cuda] [--workers 10] [--models ...] [--races square random_holes]

1. Data: each race's samples are solved once by ``--workers`` processes (the scale's sizes:
   ``race-gpu`` is the square's 4 225-node training mesh, 1 000 training and 200 test samples,
   piecewise coefficients; ``random_holes`` gives every sample its own domain and a mesh of about
   as many nodes, tested on new domains and on the same domains meshed 1.5 times finer) and saved
   under ``OUT_DIR/data``.
2. Every (race, model) pair starts in a process of its own (``--threads`` torch threads), reads
   the data, moves it to the device and says it is ready. When all are (or ``--ready-wait``
   seconds have passed) every process gets the same training budget: the time left to the
   deadline less ``--reserve`` seconds for scoring and ``--finish`` for the tables.
3. Each process trains (:func:`darcy.race.run_family`: AdamW, one-cycle schedule over the
   measured budget), scores its model on every test mesh and writes
   ``OUT_DIR/RACE/MODEL/{results.json,table.md,run.log}``. A process still running at the
   deadline is killed; what it wrote (its log) is kept.
4. ``OUT_DIR/RACE/{results.json,table.md}`` merge each race's models and
   ``OUT_DIR/summary.md`` holds the compact tables printed at the end: epochs, seconds per epoch
   and per step, the weighted relative L2 error on every test mesh, worst / train and each geoattn
   model's error over FNO's.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import subprocess
import sys
import time
from dataclasses import asdict, replace
from pathlib import Path

HERE = Path(__file__).resolve().parent
RACES = ("square", "random_holes")
MODELS = ("multigrid", "mesh_fno", "neuralop-fno")
FAMILY = "piecewise"
#: Seconds kept for scoring after training and for the tables, by scale (``--reserve``, ``--finish``).
RESERVE = {"tiny": 4.0, "race-gpu": 60.0}
FINISH = {"tiny": 2.0, "race-gpu": 8.0}
GO = "go.json"


def _scale(name: str, workers: int, refine_holes: bool, race: str):
    from darcy.race import SCALES

    scale = replace(SCALES[name], data_workers=workers)
    if race == "random_holes" and not refine_holes:
        scale = replace(scale, refine_data=False)
    return scale


def make_data(args) -> dict[str, float]:
    """Solve and save each race's samples; the seconds each took."""
    import torch

    from darcy.race import race_data

    seconds = {}
    for race in args.races:
        tic = time.perf_counter()
        data = race_data(FAMILY, _scale(args.scale, args.workers, not args.plain_holes, race), domain=race)
        folder = args.out / "data"
        folder.mkdir(parents=True, exist_ok=True)
        refined = data.pop("refined")
        torch.save(data, folder / f"{race}.pt")
        if refined is not None:  # read only by geoattn's models
            torch.save(list(refined), folder / f"{race}_refined.pt")
        seconds[race] = time.perf_counter() - tic
        print(f"data {race}: {seconds[race]:.1f} s", flush=True)
    return seconds


def child(args) -> None:
    """One (race, model): read the data, say ready, wait for the budget, train, score, write."""
    import logging

    import torch

    from darcy.race import run_family
    from darcy.report import markdown
    from timing import machine as describe_machine

    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(message)s")
    logging.getLogger("darcy_compare").setLevel(logging.INFO)
    torch.set_num_threads(args.threads)
    race, model = args.child
    folder = args.out / race / model
    device = torch.device(args.device)
    torch.zeros(1, device=device)  # the device's context before the clock starts
    data = torch.load(args.out / "data" / f"{race}.pt", weights_only=False)
    refined = args.out / "data" / f"{race}_refined.pt"
    data["refined"] = torch.load(refined, weights_only=False) if model != "neuralop-fno" and refined.exists() else None
    (folder / "ready").write_text(f"{time.time()}\n")
    go = args.out / GO
    while not go.exists():
        time.sleep(0.1)
    budget = json.loads(go.read_text())["seconds"]
    scale = replace(_scale(args.scale, 1, not args.plain_holes, race), seconds=budget)
    print(f"{race} {model}: training budget {budget:.1f} s", flush=True)
    results = {FAMILY: run_family(FAMILY, scale, [model], device, domain=race, data=data)}
    plain = {f: {k: v for k, v in r.items() if k not in ("report", "operators")} for f, r in results.items()}
    record = {"scale": asdict(scale), "domain": race, "device": str(device), "machine": describe_machine(device),
              "torch": torch.__version__, "load": os.getloadavg(), "results": plain}
    (folder / "results.json").write_text(json.dumps(record, indent=1))
    (folder / "table.md").write_text(markdown(results, scale))


def _launch(args, race: str, model: str) -> subprocess.Popen:
    folder = args.out / race / model
    folder.mkdir(parents=True, exist_ok=True)
    for stale in ("ready", "results.json", "table.md"):
        (folder / stale).unlink(missing_ok=True)
    command = [sys.executable, str(Path(__file__).resolve()), "--child", race, model, "--out", str(args.out),
               "--scale", args.scale, "--device", args.device, "--threads", str(args.threads)]
    if args.plain_holes:
        command.append("--plain-holes")
    env = dict(os.environ, PYTHONUNBUFFERED="1", OMP_NUM_THREADS=str(args.threads),
               PYTHONPATH=os.pathsep.join([str(HERE), *filter(None, [os.environ.get("PYTHONPATH")]), str(HERE.parent)]))
    log = open(folder / "run.log", "w")
    return subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)


def _stop(proc: subprocess.Popen) -> None:
    """End a child (its process group) now: SIGTERM, then SIGKILL after 2 s."""
    for sig, wait in ((signal.SIGTERM, 2.0), (signal.SIGKILL, 2.0)):
        if proc.poll() is not None:
            return
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(wait)
        except subprocess.TimeoutExpired:
            pass


def _tail(path: Path, lines: int = 2, width: int = 160) -> str:
    text = path.read_text(errors="replace").strip().splitlines() if path.exists() else []
    return " | ".join(line[:width] for line in text[-lines:])


def summary(args, status: dict, data_seconds: dict, budget: float, device: str) -> str:
    """Merge each race's model results into ``OUT_DIR/RACE`` and give the compact tables."""
    from darcy.race import Scale
    from darcy.report import markdown

    lines = [f"device {device}; scale {args.scale}; {FAMILY} coefficients; training budget {budget:.1f} s per model; "
             f"data " + ", ".join(f"{r} {s:.0f} s" for r, s in data_seconds.items())]
    for race in args.races:
        runs = {m: json.loads(p.read_text()) for m in args.models
                if (p := args.out / race / m / "results.json").exists()}
        if not runs:
            lines.append(f"\n{race}: no results")
        else:
            first = next(iter(runs.values()))
            merged = first["results"][FAMILY]
            for run in list(runs.values())[1:]:
                merged["models"].update(run["results"][FAMILY]["models"])
                merged["failed"].update(run["results"][FAMILY].get("failed", {}))
            scale = Scale(**first["scale"])
            (args.out / race / "results.json").write_text(json.dumps({**first, "results": {FAMILY: merged}}, indent=1))
            (args.out / race / "table.md").write_text(markdown({FAMILY: merged}, scale))
            meshes = list(merged["nodes"])
            steps = math.ceil(scale.n_train / scale.batch_size)
            lines.append(f"\n{race}: {scale.n_train} train / {scale.n_test} test samples, test meshes "
                         + ", ".join(f"{m} {n}" for m, n in merged["nodes"].items())
                         + f" nodes; {steps} steps of {scale.batch_size} per epoch")
            lines.append(f"| model | epochs | s/epoch | s/step | train s | " + " | ".join(meshes) + " | worst/train |")
            lines.append("|---" * (len(meshes) + 6) + "|")
            rows = merged["models"]
            for name, r in rows.items():
                errs = [r["test"][m] for m in meshes]
                lines.append(f"| {name} | {r['epochs']} | {r['seconds_per_epoch']:.2f} | "
                             f"{r['seconds_per_epoch'] / steps:.4f} | {r['train_seconds']:.0f} | "
                             + " | ".join(f"{e:.4f}" for e in errs) + f" | {max(errs[1:] or errs) / errs[0]:.2f} |")
            fno = rows.get("neuralop-fno")
            for name in [n for n in rows if n != "neuralop-fno" and fno]:
                lines.append(f"| {name} / FNO |  |  |  |  | "
                             + " | ".join(f"{rows[name]['test'][m] / fno['test'][m]:.2f}" for m in meshes) + " |  |")
            for name, why in merged.get("failed", {}).items():
                lines.append(f"{name} failed: {why}")
        for model in args.models:
            if model not in runs:
                lines.append(f"{race} {model}: {status.get((race, model), 'no result')}; log: "
                             + _tail(args.out / race / model / "run.log"))
    return "\n".join(lines)


def probe(device: str, scale_name: str = "race-gpu", count: int = 3) -> str:
    """What one new mesh costs each model at ``scale_name``'s size on ``device``: the first call on
    a ``random_holes`` mesh (its structure built), a second call, and the device memory the
    mesh's structure keeps (on CUDA) -- times the 1 000 training meshes, the per-sample race's
    first epoch and memory."""
    import numpy as np
    import torch

    from darcy.race import SCALES, model_factories
    from darcy.random_holes import random_holes_samples
    from geoattn.mesh import Mesh

    scale, device = SCALES[scale_name], torch.device(device)
    data = random_holes_samples({"train": (scale.mesh_n + 1) ** 2}, count, 0, FAMILY, refine=("train",))
    cuda = device.type == "cuda"

    def sync():
        if cuda:
            torch.cuda.synchronize(device)

    lines = []
    for name, make in model_factories(scale, list(MODELS), "random_holes").items():
        model = make().to(device).eval()
        for key in ("train", "train_refined") if name != "neuralop-fno" else ("train",):
            first, again, kept = [], [], []
            for d in data[key]:
                d = d.to(device)
                mesh = Mesh(d.pos, d.weight, d.cells)
                with torch.no_grad():
                    sync()
                    base = torch.cuda.memory_allocated(device) if cuda else 0
                    tic = time.perf_counter()
                    model(d.x, mesh)
                    sync()
                    first.append(time.perf_counter() - tic)
                    tic = time.perf_counter()
                    model(d.x, mesh)
                    sync()
                    again.append(time.perf_counter() - tic)
                    kept.append((torch.cuda.memory_allocated(device) - base) / 2**20 if cuda else float("nan"))
            lines.append(f"probe {name} on {key} ({d.pos.shape[0]} nodes): first call {np.median(first):.3f} s, "
                         f"again {np.median(again):.4f} s, kept {np.median(kept):.1f} MiB per mesh")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> str | None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--deadline", type=float, default=420.0, help="seconds for everything, data included")
    parser.add_argument("--scale", default="race-gpu", help="race-gpu (the run) or tiny (the smoke test)")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--workers", type=int, default=10, help="processes solving the samples")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads of each model's process")
    parser.add_argument("--models", nargs="+", default=list(MODELS))
    parser.add_argument("--races", nargs="+", default=list(RACES), choices=RACES)
    parser.add_argument("--reserve", type=float, help="seconds kept for scoring after training (default by scale)")
    parser.add_argument("--finish", type=float, help="seconds kept for the tables at the end (default by scale)")
    parser.add_argument("--ready-wait", type=float, default=90.0,
                        help="longest wait for every model's process to be ready before the budget is set")
    parser.add_argument("--plain-holes", action="store_true",
                        help="geoattn's models train on the random_holes samples as they are, not carried to "
                             "their meshes refined once (less device memory: one structure per mesh)")
    parser.add_argument("--probe", action="store_true",
                        help="at the end, time a new random_holes mesh of the race-gpu size in each model and "
                             "measure the device memory its structure keeps")
    parser.add_argument("--child", nargs=2, metavar=("RACE", "MODEL"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if str(HERE) not in sys.path:
        sys.path.insert(0, str(HERE))
    if args.child:
        child(args)
        return None
    start = time.monotonic()
    reserve = args.reserve if args.reserve is not None else RESERVE.get(args.scale, 60.0)
    finish = args.finish if args.finish is not None else FINISH.get(args.scale, 8.0)
    end = start + args.deadline - finish  # every model's process is gone by then
    import torch

    device = args.device
    if device.startswith("cuda") and torch.cuda.is_available():
        device = f"{device} ({torch.cuda.get_device_name(0)})"
    print(f"device {device}; torch {torch.__version__}; deadline {args.deadline:.0f} s", flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / GO).unlink(missing_ok=True)
    data_seconds = make_data(args)
    procs = {(race, model): _launch(args, race, model) for race in args.races for model in args.models}
    waited = time.monotonic()
    while time.monotonic() - waited < args.ready_wait and time.monotonic() < end - reserve - 1:
        if all((args.out / r / m / "ready").exists() or p.poll() is not None for (r, m), p in procs.items()):
            break
        time.sleep(0.2)
    budget = max(1.0, end - time.monotonic() - reserve)
    (args.out / (GO + ".tmp")).write_text(json.dumps({"seconds": budget}))
    os.replace(args.out / (GO + ".tmp"), args.out / GO)
    print(f"ready after {time.monotonic() - start:.0f} s; training budget {budget:.1f} s per model", flush=True)
    status = {}
    while time.monotonic() < end and any(p.poll() is None for p in procs.values()):
        time.sleep(0.5)
    for key, proc in procs.items():
        if proc.poll() is None:
            _stop(proc)
            status[key] = f"killed at the deadline ({time.monotonic() - start:.0f} s)"
        elif proc.returncode:
            status[key] = f"exit {proc.returncode}"
    print(f"models done after {time.monotonic() - start:.0f} s", flush=True)
    text = summary(args, status, data_seconds, budget, device)
    (args.out / "summary.md").write_text(text + "\n")
    print(text)
    print(f"total {time.monotonic() - start:.0f} s of {args.deadline:.0f}", flush=True)
    if args.probe:
        probed = probe(args.device)
        print(probed)
        text += "\n" + probed
    return text


if __name__ == "__main__":
    main()
