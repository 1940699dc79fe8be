"""Issue 56's corpus, run: every case of its "Why" section tried as a new user would, and the
message each now gets (one line), with the exit status of the command-line cases; then the
multigrid trained through the command line, with its default options, on a domain that is not the
unit square ([0, 2] x [0, 1]), its test error, and what a mesh outside its box is told.

Usage::

    python benchmarks/bad_inputs.py --docs docs/results/bad_inputs.md

``--out FOLDER`` keeps the files it makes (default: a temporary folder). ``--sigterm-tries K``
sets how many runs of ``geoattn train --workers 2`` are stopped by ``SIGTERM`` (to the command,
then to its process group; default 2 each). Runs on the CPU with one torch thread.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import io
import os
import resource
import signal
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import meshio
import numpy as np
import torch

from results_page import add_docs_argument, markdown_table, render_page, write_page

ROOT = Path(__file__).resolve().parents[1]
SQUARE = ROOT / "meshes" / "square_irregular.vtu"
CONSOLE = "import sys\nfrom geoattn.cli.entry import main\nsys.exit(main())\n"


def one_line(text: str) -> str:
    """``text`` on one line, without the ``|`` of a table's cells."""
    return " ".join(str(text).split()).replace("|", "/")


def answer(fn) -> tuple[str, str]:
    """Run ``fn()`` (a Python case); ``("-", what it raised or warned, or its result)``."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            result = fn()
        except Exception as err:  # the case's answer: what was raised
            return "-", f"{type(err).__name__}: {one_line(err)}"
    told = [w for w in caught if not issubclass(w.category, DeprecationWarning)]
    if told:
        return "-", f"{told[-1].category.__name__}: {one_line(told[-1].message)}"
    return "-", one_line(result)


def cli(*args, whole: bool = False) -> tuple[str, str]:
    """Run ``geoattn ARGS`` in this process; ``(exit status, its error line, or its last output
    line; with ``whole``, every output line joined by "; ")``."""
    from geoattn.cli.main import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main([str(a) for a in args])
    lines = (err.getvalue() if rc else out.getvalue()).strip().splitlines() or [""]
    return str(rc), "; ".join(map(one_line, lines)) if whole and not rc else one_line(lines[-1])


def simulation(path: Path, scale=(1.0, 1.0), shift=(0.0, 0.0), k: float = 1.0, fmt=None, binary=True) -> Path:
    """The square's 289-node mesh as a simulation file with fields ``a`` and ``T``, two coordinate
    columns, nodes at ``scale * p + shift``."""
    src = meshio.read(SQUARE)
    p = src.points[:, :2]
    mesh = meshio.Mesh(p * np.asarray(scale) + np.asarray(shift), [("triangle", src.cells_dict["triangle"])],
                       point_data={"a": np.sin(k * p[:, 0]) + p[:, 1], "T": np.cos(k * p[:, 1]) * p[:, 0]})
    with contextlib.redirect_stderr(io.StringIO()):  # meshio's note on 2-D points in .vtu
        meshio.write(path, mesh, **({} if fmt is None else {"file_format": fmt, "binary": binary}))
    return path


def square_mesh(n: int = 16):
    """The structured unit square of ``n`` cells per side as ``(pos, weight, cells)``, float64,
    lumped weights."""
    from geoattn.mesh import families, from_meshio

    d = from_meshio(families.unit_square(n, "structured"), dtype=torch.float64)
    return d.pos, d.weight, d.cells


def node_at(pos, x: float, y: float) -> int:
    """The node of ``pos`` nearest ``(x, y)``."""
    return int((pos - torch.tensor([x, y], dtype=pos.dtype)).norm(dim=1).argmin())


# --- part 2: the multigrid on [0, 2] x [0, 1] through the command line ---------------------------
RECIPE = """name = "{name}"
problem = "darcy"
family = "piecewise"
n = {n}
seed = {seed}
[grf]
preset = "cao"
box = [[0, 0], [2, 1]]
[meshes.train]
path = "rect.vtu"
"""


def multigrid_part(work: Path, n_train: int, n_test: int) -> dict:
    """Generate Darcy samples on a [0, 2] x [0, 1] mesh, train the multigrid with its default
    options, score it on other samples, and predict on the mesh moved out of its box."""
    src = meshio.read(SQUARE)
    for name, scale, shift in (("rect", (2.0, 1.0), 0.0), ("rect_shifted", (2.0, 1.0), 2.0),
                               ("rect_mm", (2000.0, 1000.0), 0.0)):
        p = src.points[:, :2] * np.asarray(scale) + shift
        mesh = meshio.Mesh(p, [("triangle", src.cells_dict["triangle"])])
        if name != "rect":
            mesh.point_data = {"a": np.where(src.points[:, 0] < 0.5, 3.0, 12.0)}
        with contextlib.redirect_stderr(io.StringIO()):
            meshio.write(work / f"{name}.vtu", mesh)
    (work / "train.toml").write_text(RECIPE.format(name="train", n=n_train, seed=0))
    (work / "test.toml").write_text(RECIPE.format(name="test", n=n_test, seed=1))
    steps, out = [], {}
    for command in (["generate", "--recipe", "train.toml", "--out", "train.h5", "--no-progress"],
                    ["generate", "--recipe", "test.toml", "--out", "test.h5", "--no-progress"],
                    ["train", "train.h5", "--model", "multigrid", "--out", "mg", "--no-progress"],
                    ["evaluate", "mg/best.pt", "test.h5"],
                    ["predict", "--checkpoint", "mg/best.pt", "--mesh", "rect_shifted.vtu", "--field", "a",
                     "-o", "shifted_pred.vtu"],
                    ["predict", "--checkpoint", "mg/best.pt", "--mesh", "rect_mm.vtu", "--field", "a",
                     "-o", "mm_pred.vtu"]):
        start = time.perf_counter()
        buffer = io.StringIO()
        with contextlib.chdir(work), contextlib.redirect_stdout(buffer), contextlib.redirect_stderr(buffer):
            from geoattn.cli.main import main

            rc = main(command)
        seconds = time.perf_counter() - start
        lines = [one_line(line) for line in buffer.getvalue().strip().splitlines() if line.strip()]
        steps.append({"command": "geoattn " + " ".join(command), "rc": rc, "seconds": seconds, "lines": lines})
    evaluate = steps[3]["lines"]
    out["test_error"] = float(evaluate[-1].split()[-2]) if steps[3]["rc"] == 0 else None
    out.update(steps=steps, n_train=n_train, n_test=n_test)
    return out


# --- part 1: the cases ---------------------------------------------------------------------------
def cases(work: Path, mg: dict, sigterm_tries: int) -> list[tuple[str, str, str, str]]:
    """``(group, case, rc, message)`` of every case of the issue's "Why", in its order."""
    from geoattn import atomic
    from geoattn.mesh import Mesh, families, from_meshio, validate_mesh
    from geoattn.mesh.io import cast_positions
    from geoattn.models import MultigridOperator, build_model

    rows = []

    def add(group, case, result):
        rows.append((group, case, *result))

    def unit(scale=1.0, shift=0.0):
        d = from_meshio(families.unit_square(6, "irregular", seed=1), dtype=torch.float64)
        return Mesh(d.pos * scale + shift, d.weight * scale**2, d.cells)

    def multigrid_on(mesh):
        torch.manual_seed(0)
        model = build_model("multigrid", in_channels=1, out_channels=1).double()
        model(unit().pos[:, :1], unit())  # its first call fits the box to the unit square
        return model(mesh.pos[:, :1], mesh)

    w = "Wrong results and crashes"
    add(w, "multigrid (default box, fitted on the unit square) called on the same mesh translated by 2",
        answer(lambda: multigrid_on(unit(shift=2.0))))
    add(w, "the same mesh scaled by 1.5", answer(lambda: multigrid_on(unit(scale=1.5))))
    add(w, "`geoattn predict`, multigrid checkpoint, mesh translated by (2, 2)", _step(mg, 4))
    add(w, "`geoattn predict`, the same mesh in millimetres (x1000)", _step(mg, 5))
    add(w, "a multigrid box with an infinite corner",
        answer(lambda: MultigridOperator(1, 1, box=((0.0, 0.0), (1.0, float("inf"))))))
    src = work / "links" / "src"
    (src / "run_1").mkdir(parents=True)
    for i in range(3):
        simulation(src / "run_1" / f"s{i}.vtu", k=1.0 + i)
    os.symlink("run_1", src / "latest")
    add(w, "`geoattn import 'src/**/*.vtu'`, src holding run_1/ (3 files) and latest -> run_1",
        cli("import", f"{src}/**/*.vtu", "--x", "a", "--y", "T", "--split", "0.34,0.33,0.33",
            "--out", work / "links" / "d.h5", "--no-progress"))
    loop = work / "loop" / "src"
    (loop / "run_1").mkdir(parents=True)
    for i in range(3):
        simulation(loop / "run_1" / f"s{i}.vtu", k=1.0 + i)
    os.symlink("..", loop / "run_1" / "up")  # a loop of links
    add(w, "the same through a loop of links (run_1/up -> ..)",
        cli("import", f"{loop}/**/*.vtu", "--x", "a", "--y", "T", "--split", "0.34,0.33,0.33",
            "--out", work / "loop" / "d.h5", "--no-progress"))
    add(w, "`geoattn import` onto a disk that fills (every write fails with ENOSPC, simulated)",
        _full_disk(atomic, lambda: cli("import", src / "run_1", "--x", "a", "--y", "T", "--split",
                                       "0.34,0.33,0.33", "--out", work / "full" / "d.h5", "--no-progress")))
    fno = dict(in_channels=1, out_channels=1, width=8, depth=1, modes=2)
    add(w, "`mesh_fno(period=1e-300)`", answer(lambda: build_model("mesh_fno", **fno, period=1e-300)))
    add(w, "`mesh_fno(period=True)`", answer(lambda: build_model("mesh_fno", **fno, period=True)))
    pos, weight, cells = square_mesh()
    add(w, "`mesh_fno(period=0.5)` on nodes spanning 1",
        answer(lambda: build_model("mesh_fno", **fno, period=0.5).double()(pos[:, :1], Mesh(pos, weight))))

    k = "Killed without a word"

    def cube():
        d = from_meshio(families.unit_cube(12), dtype=torch.float32)
        model = build_model("multigrid", in_channels=1, out_channels=1, dim=3, grid=12)
        mesh = Mesh(d.pos, d.weight, d.cells)
        start = time.perf_counter()
        y = model(d.pos[:, :1], mesh)  # the restriction built once, for this mesh
        return (f"answered: output {list(y.shape)} in {time.perf_counter() - start:.1f} s, the mesh's memo "
                f"{mesh.memo_bytes() / 2**20:.1f} MiB (process peak {_peak_gib():.2f} GiB)")

    add(k, "multigrid (12^3 first grid, cells given) on a 2 197-node tetrahedral mesh of the unit cube",
        answer(cube))

    r = "A raw error that did not name the cause"
    n = len(pos)
    half = torch.cat([torch.zeros(100), torch.ones(n - 100)]).long()
    for case, make in (
            ("a `Mesh` whose cells index past the nodes", lambda: Mesh(pos, weight, cells + 10000)),
            ("cells with negative indices", lambda: Mesh(pos, weight, cells - 1)),
            ("cells that are floats", lambda: Mesh(pos, weight, cells.double())),
            ("a negative batch vector", lambda: Mesh(pos, weight, batch=half - 1)),
            ("a float batch vector", lambda: Mesh(pos, weight, batch=half.float())),
            ("`Mesh.batch` of a 2-D and a 3-D mesh",
             lambda: Mesh.batch([Mesh(pos, weight), Mesh(torch.rand(5, 3, dtype=torch.float64),
                                                            torch.full((5,), 0.2, dtype=torch.float64))])),
            ("a mesh's tensors on two devices (cpu and meta)", lambda: Mesh(pos, weight.to("meta"))),
            ("`x` on another device (meta) than the mesh",
             lambda: build_model("tno", in_channels=1, out_channels=1, width=8, depth=1, num_heads=2).double()(
                 torch.zeros(n, 1, dtype=torch.float64, device="meta"), Mesh(pos, weight))),
            ("`grid=8.5`", lambda: build_model("multigrid", in_channels=1, out_channels=1, grid=8.5)),
            ("`period=np.float32(1.0)` (valid)",
             lambda: f"accepted: period {build_model('mesh_fno', **fno, period=np.float32(1.0)).period}"),
            ("`period=torch.tensor(1.0)` (valid)",
             lambda: f"accepted: period {build_model('mesh_fno', **fno, period=torch.tensor(1.0)).period}"),
            ("a mesh with cells out of range given to a model that does not read the cells (TNO)",
             lambda: build_model("tno", in_channels=1, out_channels=1, width=8, depth=1, num_heads=2).double()(
                 pos[:, :1], Mesh(pos, weight, cells + 10000))),
            ("a degenerate (zero-area) cell given to the multigrid's restriction",
             lambda: multigrid_on(Mesh(pos, weight, torch.cat([cells, torch.tensor([[node_at(pos, 0, 0), node_at(
                 pos, 0, 1 / 16), node_at(pos, 0, 2 / 16)]])])))),  # three nodes on one line
    ):
        add(r, case, answer(make))

    m = "A mesh that changes under its memo"

    def changed(change, name="tno", **kw):
        torch.manual_seed(0)
        model = build_model(name, in_channels=1, out_channels=1, width=8, depth=1, **kw).double()
        mesh, x = Mesh(pos.clone(), weight.clone()), pos[:, :1].clone()
        with torch.no_grad():
            before = model(x, mesh)
            change(mesh)
            after = model(x, mesh)
            fresh = model(x, Mesh(mesh.pos.clone(), mesh.weight.clone()))
        moved = float((after - before).norm() / before.norm())
        gap = float((after - fresh).abs().max())
        return (f"rebuilt: the answer equals a fresh mesh's (largest difference {gap:.1g}), "
                f"{moved:.1%} from the answer before the change")

    add(m, "`mesh.weight` negated in place after a first call", answer(lambda: changed(lambda g: g.weight.neg_(),
                                                                                          num_heads=2)))
    add(m, "a NaN written into `mesh.pos` after a first call",
        answer(lambda: changed(lambda g: g.pos.__setitem__((7, 1), float("nan")), num_heads=2)))
    add(m, "`mesh.pos` scaled in place (x1.5) after a GNO call",
        answer(lambda: changed(lambda g: g.pos.mul_(1.5), name="gno", radius=0.15)))

    e = "Elsewhere"
    big = np.array([[node_at(pos, 0, 0), node_at(pos, 1, 0), node_at(pos, 1, 1)]])  # half the square, over 256
    # cells and sharing no facet with them
    add(e, "a cell lying over half the square's 512 cells, sharing no facet with them",
        answer(lambda: validate_mesh(pos.numpy(), np.concatenate([cells.numpy(), big]), "triangle")))
    utm = work / "utm"
    utm.mkdir()
    for i in range(4):
        simulation(utm / f"s{i}.vtu", scale=(100.0, 100.0), shift=(500000.0, 4000000.0), k=1.0 + 0.2 * i)
    cli("import", utm, "--x", "a", "--y", "T", "--out", work / "utm.h5", "--split", "0.75,0.25", "--no-progress")
    add(e, "UTM-like meshes (x about 5e5, y about 4e6, nodes 3 m apart) imported, then `geoattn train` in float32",
        cli("train", work / "utm.h5", "--width", "8", "--depth", "1", "--epochs", "1", "--out", work / "utm_run",
            "--no-progress"))
    add(e, "the same imported with `--origin auto`, then trained",
        _then(cli("import", utm, "--x", "a", "--y", "T", "--out", work / "utm_centred.h5", "--split", "0.75,0.25",
                  "--origin", "auto", "--no-progress"),
              lambda: cli("train", work / "utm_centred.h5", "--width", "8", "--depth", "1", "--epochs", "1",
                          "--out", work / "utm_centred_run", "--no-progress")))

    def graded(gap):
        x = np.unique(np.concatenate([np.linspace(0, 0.999, 50), 1 - np.arange(20)[::-1] * gap]))
        return np.stack([x, np.zeros_like(x)], 1)

    def cast_graded():
        x = cast_positions(graded(3.5e-7), torch.float32)[:, 0]
        return f"accepted: {len(x)} nodes, distinct and in order: {bool((x[1:] > x[:-1]).all())}"

    add(e, "a valid graded mesh, nodes 3.5e-7 apart at coordinate 1, cast to float32", answer(cast_graded))
    add(e, f"`geoattn train --workers 2` stopped by SIGTERM ({sigterm_tries} runs to the command, "
           f"{sigterm_tries} to its process group)", _sigterm(work / "mg_data" / "train.h5", work, sigterm_tries))
    add(e, "`Trainer(seconds=...)` resumed with another budget", answer(lambda: _resumed_budget(work, pos, weight)))
    for name, seed, mesh in (("a", 0, "square_irregular.vtu"), ("b", 0, "square_graded.vtu"),
                             ("c", 5, "square_graded.vtu")):
        cli("generate", "--mesh", f"{name}={ROOT / 'meshes' / mesh}", "--n", "2", "--modes", "4", "--seed", seed,
            "--out", work / f"pair_{name}.h5", "--no-progress")
    cli("train", work / "pair_a.h5", "--width", "8", "--depth", "1", "--epochs", "1", "--out", work / "pair_run",
        "--no-progress")
    add(e, "`geoattn evaluate` on two files of 2 samples each, other samples (seed 0 and 5)",
        cli("evaluate", work / "pair_run" / "last.pt", work / "pair_a.h5", work / "pair_c.h5"))
    bad = work / "unreadable"
    bad.mkdir()
    simulation(bad / "a_good.vtu")
    (bad / "b_empty.vtu").write_bytes(b"")
    (bad / "c_text.msh").write_text("$MeshFormat\nnot a mesh\n")
    (bad / "d_broken.xdmf").write_text("<Xdmf><Domain><Grid>")
    (bad / "notes.txt").write_text("hello\n")
    add(e, "`geoattn import` of a folder with an unreadable .vtu, .msh and .xdmf, a .txt and one good file",
        cli("import", bad, "--x", "a", "--y", "T", "--out", work / "unreadable.h5", "--no-progress"))
    two = work / "two.vtu"
    points = np.array([[0.2, 0.3, 0.0], [0.7, 0.9, 0.0]])
    meshio.write(two, meshio.Mesh(points, [("vertex", np.arange(2).reshape(-1, 1))], point_data={"a": points[:, 0]}))
    add(e, "`geoattn predict` on a two-point cloud", cli("predict", "--checkpoint", work / "mg_data" / "mg" / "best.pt",
                                                          "--mesh", two, "--field", "a", "-o", work / "two_pred.vtu"))
    for fmt, binary in (("gmsh22", False), ("gmsh", False), ("gmsh", True)):
        path = simulation(work / f"meshio_{fmt}_{'binary' if binary else 'ascii'}.msh", fmt=fmt, binary=binary)
        add(e, f"a 2-D .msh written by meshio ({'4.1' if fmt == 'gmsh' else '2.2'}, {'binary' if binary else 'ASCII'}, "
               "two coordinate columns), `geoattn info`", cli("info", path, whole=True))
    local = [(f"{work}{os.sep}", ""), (f"{ROOT}{os.sep}", "")]  # the page names no folder of this machine
    for i, row in enumerate(rows):
        rows[i] = tuple(_replace(cell, local) for cell in row)
    return rows


def _replace(text: str, pairs) -> str:
    for old, new in pairs:
        text = text.replace(old, new)
    return text


def _step(mg: dict, i: int) -> tuple[str, str]:
    step = mg["steps"][i]
    return str(step["rc"]), step["lines"][-1] if step["lines"] else ""


def _then(first: tuple[str, str], then) -> tuple[str, str]:
    return then() if first[0] == "0" else first


def _peak_gib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # kB on Linux


def _full_disk(atomic, run) -> tuple[str, str]:
    """``run()`` with every write of the guarded HDF5 writer failing with ``ENOSPC``."""
    class Full(io.FileIO):
        def write(self, data):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    guarded = atomic.GuardedFile.__init__

    def full(self, path, mode):
        guarded(self, path, mode)
        self._fh.close()
        self._fh = Full(path, mode.replace("b", ""))

    atomic.GuardedFile.__init__ = full
    try:
        return run()
    finally:
        atomic.GuardedFile.__init__ = guarded


def _sigterm(data: Path, work: Path, tries: int) -> tuple[str, str]:
    """Stop ``geoattn train --workers 2`` with ``SIGTERM`` once it runs its workers, ``tries``
    times to the process and ``tries`` times to its group; the exit statuses and the stderr."""
    statuses, texts = [], set()
    for k in range(2 * tries):
        out = work / f"sigterm{k}"
        env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
        proc = subprocess.Popen([sys.executable, "-c", CONSOLE, "train", str(data), "--width", "8", "--depth", "1",
                                 "--epochs", "500", "--workers", "2", "--batch-size", "2", "--out", str(out),
                                 "--no-progress"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                start_new_session=True, env=env)
        deadline = time.monotonic() + 120
        while not (out / "last.pt").exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.1 * k)
        if k < tries:
            proc.send_signal(signal.SIGTERM)
        else:
            os.killpg(proc.pid, signal.SIGTERM)
        _, err = proc.communicate(timeout=120)
        statuses.append(proc.returncode)
        texts.add(one_line(err) if len(err.strip().splitlines()) == 1 else f"{len(err.strip().splitlines())} lines")
    return "/".join(map(str, sorted(set(statuses)))), " or ".join(sorted(texts)) + f" ({2 * tries} of {2 * tries} runs)"


def _resumed_budget(work: Path, pos, weight):
    from geoattn.mesh import MeshData
    from geoattn.train import NormalizedOperator, Trainer
    from geoattn.models import build_model

    torch.manual_seed(0)
    n = len(pos)
    samples = [MeshData(x=torch.rand(n, 1), y=torch.rand(n, 1), pos=pos.float(), weight=weight.float())
               for _ in range(4)]

    def fit(seconds, resume):
        torch.manual_seed(0)
        op = NormalizedOperator(build_model("tno", in_channels=1, out_channels=1, width=8, depth=1))
        return Trainer(op, work / "budget", epochs=1, batch_size=2, progress=False, seconds=seconds).fit(
            samples, resume=resume)

    fit(1000.0, False)
    fit(5.0, True)
    return "resumed without a word"


def markdown(rows, mg: dict, seconds: float) -> str:
    table = markdown_table(["case", "rc", "message now given"], [(case, rc, message) for _, case, rc, message in rows])
    parts = []
    group = None
    body = table.splitlines()
    head, rule, lines = body[0], body[1], body[2:]
    for (g, *_), line in zip(rows, lines):
        if g != group:
            parts += ["", f"## {g}", "", head, rule]
            group = g
        parts.append(line)
    steps = markdown_table(["command (in the work folder)", "rc", "s", "last line"],
                           [(f"`{s['command']}`", s["rc"], f"{s['seconds']:.1f}", s["lines"][-1] if s["lines"] else "")
                            for s in mg["steps"]])
    parts += ["", "## The multigrid on [0, 2] x [0, 1] through the command line, default options", "",
              f"Mesh `rect.vtu`: the 289-node irregular square mesh stretched to [0, 2] x [0, 1]. Recipes: "
              f"`train.toml` Darcy, piecewise-constant coefficients, GRF preset cao on the box [[0, 0], [2, 1]], "
              f"{mg['n_train']} samples, seed 0; `test.toml` the same with {mg['n_test']} samples, seed 1. "
              f"`rect_shifted.vtu` is `rect.vtu` moved by (2, 2), `rect_mm.vtu` in millimetres (x1000). "
              f"Test error (relative L2(D), mean over the test samples): **{mg['test_error']}**.", "", steps, "",
              f"Whole run: {seconds:.0f} s (1-minute load average {os.getloadavg()[0]:.1f} at its end, "
              f"{os.cpu_count()} cores)."]
    return "\n".join(parts).strip()


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="work folder (default: a temporary folder)")
    parser.add_argument("--train", type=int, default=120, help="training samples of part 2 (default: %(default)s)")
    parser.add_argument("--test", type=int, default=40, help="test samples of part 2 (default: %(default)s)")
    parser.add_argument("--sigterm-tries", type=int, default=2, help="SIGTERM runs of each kind (default: %(default)s)")
    add_docs_argument(parser)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        work = args.out or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        (work / "mg_data").mkdir(exist_ok=True)
        mg = multigrid_part(work / "mg_data", args.train, args.test)
        rows = cases(work, mg, args.sigterm_tries)
    seconds = time.perf_counter() - start
    given = list(sys.argv[1:] if argv is None else argv)
    given = [Path(a).name if i and given[i - 1] == "--out" else a for i, a in enumerate(given)]
    command = " ".join(["python", "benchmarks/bad_inputs.py", *given])
    title = "Bad inputs, issue 56 (`benchmarks/bad_inputs.py`)"
    machine = "CPU, 1 torch thread"
    text = markdown(rows, mg, seconds)
    print(render_page(title, command, text, machine))
    if args.docs:
        write_page(args.docs, title, command, text, machine)
    return {"rows": rows, "multigrid": mg, "seconds": seconds}


if __name__ == "__main__":
    main()
