"""Machinery of ``benchmarks/darcy_compare.py`` and its modules ``benchmarks/darcy/`` on a tiny setting
(the full run is a benchmark)."""

import importlib
from dataclasses import replace

import numpy as np
import pytest
import torch
from scipy.spatial import Delaunay

from geoattn.data.darcy import darcy_samples
from geoattn.mesh import Mesh, families, from_meshio
from geoattn.train import NormalizedOperator, relative_l2, symmetrize


SCRIPT = "darcy_compare"  # the ``script`` fixture (conftest.py)


def _module(name: str):
    """A module of ``benchmarks/darcy/`` as a module-scoped fixture (``script`` puts its folder on
    ``sys.path``)."""

    @pytest.fixture(scope="module", name=name)
    def fixture(script):
        return importlib.import_module(f"darcy.{name}")

    return fixture


meshes, peers, race, report = (_module(name) for name in ("meshes", "peers", "race", "report"))


def test_mesh_grid_interpolation_is_exact_for_linear_functions(peers):
    # Piecewise-linear (mesh -> grid) and bilinear (grid -> mesh) interpolation reproduce
    # affine functions exactly, and their rows are partitions of unity.
    mesh = families.unit_square(7, "irregular", seed=3)
    pos = mesh.points[:, :2]
    grid = peers._grid(torch.as_tensor(pos), 9)
    f = lambda p: 0.3 + 2.0 * p[:, 0] - 1.5 * p[:, 1]  # noqa: E731
    to_grid = peers.mesh_to_grid(pos, grid).tocsr()
    to_mesh = peers.grid_to_mesh(pos, grid.min(0), grid.max(0), 9).tocsr()
    np.testing.assert_allclose(to_grid @ f(pos), f(grid), atol=1e-12)
    np.testing.assert_allclose(to_mesh @ f(grid), f(pos), atol=1e-12)
    np.testing.assert_allclose(to_grid.sum(1).A[:, 0], 1.0, atol=1e-12)
    # a bilinear function x*y is exact for the bilinear grid -> mesh interpolation too
    np.testing.assert_allclose(to_mesh @ (grid[:, 0] * grid[:, 1]), pos[:, 0] * pos[:, 1], atol=1e-12)


def test_flat_batch_is_grouped_by_mesh(peers):
    pos_a, pos_b = torch.rand(5, 2), torch.rand(3, 2)
    pos = torch.cat([pos_a, pos_a, pos_b])
    x = torch.arange(13.0)[:, None]
    batch = torch.tensor([0] * 5 + [1] * 5 + [2] * 3)
    groups = peers._graphs(x, pos, batch)
    assert [g[0].shape for g in groups] == [(2, 5, 1), (1, 3, 1)]
    assert torch.equal(groups[0][0][1, :, 0], torch.arange(5.0, 10.0))


def test_segment_reduce_equals_neuralop_loop(peers):
    pytest.importorskip("neuralop")
    from neuralop.layers.segment_csr import segment_csr

    src = torch.randn(3, 10, 4)
    ptr = torch.tensor([0, 2, 2, 7, 10])  # includes an empty neighbourhood
    for reduction in ("sum", "mean"):
        torch.testing.assert_close(peers.segment_reduce(src, ptr[None].repeat(3, 1), reduction),
                                   segment_csr(src, ptr[None].repeat(3, 1), reduction, False))
        torch.testing.assert_close(peers.segment_reduce(src[0], ptr, reduction),
                                   segment_csr(src[0], ptr, reduction, False))


def test_tiny_run_scores_every_model_on_every_mesh(script, meshes, race, tmp_path):
    models = ["tno"]
    try:
        import neuralop  # noqa: F401
        models += ["neuralop-gino", "neuralop-fno"]
    except ImportError:
        pass
    results = script.main(["--scale", "tiny", "--families", "piecewise", "--models", *models,
                       "--out", str(tmp_path)])
    res = results["piecewise"]
    assert list(res["nodes"]) == ["train", "refined", "graded", "foreign"]
    assert res["nodes"]["refined"] > 3 * res["nodes"]["train"]
    assert set(res["models"]) == set(models)
    for name, row in res["models"].items():
        assert row["parameters"] > 0 and row["seconds_per_epoch"] > 0
        assert all(0 < e < 2 for e in row["test"].values())
    # the reported score is the weighted relative L2 error of the prediction on each mesh
    for name, op in res["operators"].items():
        sample = darcy_samples({"graded": meshes.benchmark_meshes(6)["graded"]}, 1, 0, "piecewise",
                               start=race.SCALES["tiny"].n_train)["graded"][0]
        with torch.no_grad():
            pred = op.eval()(sample.x, sample.pos, sample.weight)
        expected = relative_l2(pred, sample.y, sample.weight)
        torch.testing.assert_close(res["report"].errors[name]["graded"][0], expected)
    assert (tmp_path / "table.md").read_text().count("| tno |") == 1
    assert (tmp_path / "darcy_compare_mesh.png").stat().st_size > 0
    assert (tmp_path / "darcy_compare_time.png").stat().st_size > 0
    merged = script.main(["--combine", str(tmp_path / "results.json"), "--out", str(tmp_path / "merged")])
    assert merged["piecewise"]["models"]["tno"]["test"] == pytest.approx(res["models"]["tno"]["test"])
    assert (tmp_path / "merged" / "table.md").read_text() == (tmp_path / "table.md").read_text()


def _peers():
    """The neuralop models when neuralop is installed (the other tests run without it)."""
    try:
        import neuralop  # noqa: F401
    except ImportError:
        return []
    return ["neuralop-gino", "neuralop-fno"]


@pytest.mark.parametrize("domain", ["lshape", "holes"])
def test_domain_meshes_cover_the_same_domain(meshes, domain):
    from geoattn.mesh import from_meshio

    domain_meshes = meshes.benchmark_meshes(4, domain)
    assert len(domain_meshes) >= 3 and "train" in domain_meshes and "refined" in domain_meshes
    areas = [float(from_meshio(m).weight.sum()) for m in domain_meshes.values()]
    np.testing.assert_allclose(areas, areas[0], rtol=1e-6)  # boundary nodes never move
    pos = {k: m.points[:, :2] for k, m in domain_meshes.items()}
    assert all(meshes.inside(domain, p).all() for p in pos.values())
    other = [k for k in domain_meshes if k not in ("train", "refined")][0]
    assert len(pos[other]) != len(pos["train"]) or not np.allclose(pos[other], pos["train"])


def test_grid_values_outside_the_domain_are_zero(meshes, peers):
    # L-shape: the grid points in the removed quadrant get no value from the mesh, the others
    # the piecewise-linear interpolant (exact for an affine function), and the mask says which.
    pos = meshes.benchmark_meshes(4, "lshape")["train"].points[:, :2]
    to_grid, _, mask = peers.grid_operators(pos, 9, "lshape")
    grid = peers._grid(torch.as_tensor(pos), 9)
    assert mask.sum() == 9 * 9 - 4 * 4  # the open quadrant holds 4 x 4 of the 9 x 9 points
    f = lambda p: 0.3 + 2.0 * p[:, 0] - 1.5 * p[:, 1]  # noqa: E731
    values = to_grid.tocsr() @ f(pos)
    np.testing.assert_allclose(values[mask], f(grid[mask]), atol=1e-12)
    assert np.all(values[~mask] == 0)
    assert peers.grid_operators(pos, 9)[2] is None  # no domain, no mask


@pytest.mark.slow
def test_wall_clock_budget_run(script, tmp_path):
    results = script.main(["--scale", "tiny", "--families", "piecewise", "--models", "tno", "slice",
                       "--seconds", "2", "--out", str(tmp_path)])
    rows = results["piecewise"]["models"]
    assert set(rows) == {"tno", "slice"}
    for row in rows.values():
        assert row["epochs"] >= 1 and row["train_seconds"] > 0 and row["peak_mib"] >= 0
        assert row["worst_over_train"] == pytest.approx(max(list(row["test"].values())[1:]) / row["test"]["train"])
    assert "| slice |" in (tmp_path / "table.md").read_text()


def test_peers_get_the_configuration_their_users_would_pick(race):
    """FNO's grid matches the training mesh's node count (``round(sqrt(N))`` per axis: 33 for the
    1 089 nodes of the race's square), with neuralop's example modes (16), masked off the square;
    the multigrid's first grid has about as many cells, a multiple of 8 for its 4 levels, over the
    domain's bounding box."""
    scale = race.SCALES["race"]
    assert race.training_nodes(scale.mesh_n) == 1089
    assert race.peer_configuration(scale) == dict(grid=33, modes=16, width=32, depth=4, domain=None, dim=2)
    assert race.peer_configuration(scale, "lshape")["domain"] == "lshape"
    small = race.peer_configuration(replace(race.SCALES["tiny"], grid=None))  # 7 x 7 nodes: 7 points, 3 modes
    assert small["grid"] == 7 and small["modes"] == 3
    config = race.multigrid_configuration(scale)
    assert config["grid"] == 32 and config["levels"] == 4
    np.testing.assert_allclose(config["box"], ((0, 0), (1, 1)), atol=1e-12)
    lower, upper = race.domain_box(scale.mesh_n, "lshape")
    np.testing.assert_allclose([lower, upper], [(-1, -1), (1, 1)], atol=1e-12)


def _record_budgets(race, monkeypatch, epochs: int) -> list:
    """Make the race's ``train_ensemble`` record the training-time budget it is given and train
    ``epochs`` epochs instead; the list of budgets it fills."""
    budgets, real = [], race.train_ensemble

    def recorded(*args, seconds=None, **kwargs):
        budgets.append(seconds)
        return real(*args, **{**kwargs, "epochs": epochs})

    monkeypatch.setattr(race, "train_ensemble", recorded)
    return budgets


def test_budget_is_the_trainers_measured_time(meshes, race, script, monkeypatch):
    """``--seconds S`` reaches the trainer as its training-time budget (divided among the members
    of an ensemble); the epochs reported are those it trained, and the configurations are in the
    table."""
    budgets = _record_budgets(race, monkeypatch, epochs=2)
    results = script.main(["--scale", "tiny", "--families", "piecewise", "--models", "tno", "--seconds", "8",
                           "--ensemble", "2"])
    row = results["piecewise"]["models"]["tno"]
    assert budgets == [4.0] and row["epochs"] == 2
    assert row["config"].startswith("TNO(") or "width=8" in row["config"]


@pytest.mark.slow
def test_tiny_run_on_the_disk_with_holes(script):
    models = ["tno", "mesh_fno", *_peers()]
    results = script.main(["--scale", "tiny", "--families", "piecewise", "--domain", "holes",
                       "--models", *models])
    res = results["piecewise"]
    assert list(res["nodes"]) == ["train", "refined", "perturbed"]
    assert set(res["models"]) == set(models)
    for row in res["models"].values():
        assert all(0 < e < 2 for e in row["test"].values())


@pytest.mark.slow
def test_samples_solved_by_several_processes_are_the_same_samples(meshes):
    """``--data-workers``: chunks of the indices solved in other processes, put back in order."""
    domain_meshes = meshes.benchmark_meshes(5)
    field = meshes.coefficient_field(domain_meshes)
    one = meshes.solve_samples(domain_meshes, 5, 3, "lognormal", field, start=2)
    split = meshes.solve_samples(domain_meshes, 5, 3, "lognormal", field, start=2, workers=2)
    assert list(split) == list(domain_meshes)
    for name in domain_meshes:
        assert len(split[name]) == 5
        for a, b in zip(one[name], split[name]):
            assert torch.equal(a.x, b.x) and torch.equal(a.y, b.y) and torch.equal(a.pos, b.pos)
    assert not torch.equal(one["train"][0].x, one["train"][1].x)  # in order, not one sample repeated


def test_a_failing_model_is_left_out_and_named(script, report, monkeypatch, tmp_path):
    """A model that fails (here: out of memory in its first training step) does not stop the race:
    the others are trained and scored, and the failure is named in the table and the results."""
    import geoattn.train.trainer as trainer_module

    plain = trainer_module.Trainer.fit

    def fit(self, train, *args, **kwargs):
        if type(self.operator.model).__name__ == "TNO":
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 154.31 GiB (simulated)")
        return plain(self, train, *args, **kwargs)

    monkeypatch.setattr(trainer_module.Trainer, "fit", fit)
    results = script.main(["--scale", "tiny", "--families", "piecewise", "--models", "tno", "galerkin",
                           "--out", str(tmp_path)])
    res = results["piecewise"]
    assert list(res["models"]) == ["galerkin"] and set(res["report"].errors) == {"galerkin"}
    assert res["failed"] == {"tno": "OutOfMemoryError: CUDA out of memory. Tried to allocate 154.31 GiB (simulated)"}
    assert "tno" in report.table(results) and "Failed, left out: `tno`" in (tmp_path / "table.md").read_text()


def test_fem_floor_falls_under_refinement(meshes, race):
    """The targets' own discretisation error: positive on every mesh, and on the refined
    training mesh (h/2) at most about a quarter of the training mesh's, as P1 elements converge
    at second order in L2 (a loose 0.5 here, the coefficient being rough)."""
    floor = meshes.fem_floor(race.SCALES["tiny"], "lognormal")
    assert set(floor) == {"train", "refined", "graded", "foreign"}
    assert all(0 < v < 0.5 for v in floor.values())
    assert floor["refined"] < 0.5 * floor["train"]


def test_reference_targets_are_the_fine_solution_on_every_mesh(meshes, race):
    """On the twice-refined training mesh itself the reference targets are that mesh's own
    solutions (interpolation at the same nodes); on a coarser mesh they are its nodal values,
    so they differ from the coarse mesh's own solutions by the FEM floor. Inputs are untouched."""
    scale = race.SCALES["tiny"]
    base = meshes.benchmark_meshes(scale.mesh_n)
    domain_meshes = {"train": base["train"], "twice": families.refine(base["train"], 2)}
    field = meshes.coefficient_field(base)
    own = darcy_samples(domain_meshes, scale.n_test, 0, "lognormal", field, start=scale.n_train)
    ref = meshes.reference_targets(domain_meshes, scale, "lognormal", field)
    for d, r in zip(own["twice"], ref["twice"]):
        torch.testing.assert_close(r.y, d.y, rtol=1e-6, atol=1e-7)
    for d, r in zip(own["train"], ref["train"]):
        assert torch.equal(r.x, d.x) and torch.equal(r.pos, d.pos)
        assert 1e-3 < float(relative_l2(d.y, r.y, d.weight)) < 0.2


def test_inert_stand_in_answers_every_import_of_its_package(load_script, monkeypatch):
    import sys

    pt = load_script("physicsnemo_transolver")
    finder = pt._InertModules("not_a_real_package")
    monkeypatch.setattr(sys, "meta_path", [finder] + sys.meta_path)
    import not_a_real_package.transforms as transforms  # noqa: F401

    assert sys.modules["not_a_real_package"].__version__ == "0+inert"
    assert transforms.InterpolationMode.BILINEAR is not None  # any attribute is a placeholder
    assert finder.find_spec("numpy", None) is None  # other packages import as usual
    for name in [n for n in sys.modules if n.startswith("not_a_real_package")]:
        monkeypatch.delitem(sys.modules, name)


def test_stand_ins_only_for_packages_transolver_never_calls(load_script):
    pt = load_script("physicsnemo_transolver")
    assert pt._stand_in_needed(ModuleNotFoundError("No module named 'torchvision'", name="torchvision")) == "torchvision"
    assert pt._stand_in_needed(RuntimeError("operator torchvision::nms does not exist")) == "torchvision"
    assert pt._stand_in_needed(ModuleNotFoundError("No module named 'warp'", name="warp")) == "warp"
    assert pt._stand_in_needed(ModuleNotFoundError("No module named 'warp.fem'", name="warp.fem")) == "warp"
    assert pt._stand_in_needed(ModuleNotFoundError("No module named 'tensordict'", name="tensordict")) is None
    assert pt._stand_in_needed(ImportError("cannot import name 'Mlp' from 'physicsnemo.nn'")) is None


def test_transolver_joins_the_race_when_physicsnemo_is_installed(race):
    """PhysicsNeMo's Transolver, when importable, is a model of the race and runs on a flat batch
    of two meshes like the other adapters; without PhysicsNeMo it is left out with a warning."""
    from physicsnemo_transolver import load_transolver

    factories = race.model_factories(race.SCALES["tiny"])
    if load_transolver() is None:
        assert "physicsnemo-transolver" not in factories
        pytest.skip("NVIDIA PhysicsNeMo is not installed")
    model = factories["physicsnemo-transolver"]()
    pos = torch.rand(30, 2)
    batch = torch.tensor([0] * 12 + [1] * 18)
    x = torch.randn(30, 1)
    out = model(x, pos, torch.ones(30), batch)
    assert out.shape == (30, 1)
    alone = model(x[12:], pos[12:], torch.ones(18))
    torch.testing.assert_close(out[12:], alone)


def test_supersampled_run_refines_the_geoattn_models_meshes_only(script, meshes, race):
    """``--supersample 2``: geoattn's models train and are scored through ResolvedQuadrature at
    half the training mesh's edge (mesh_fno with the modes of the refined mesh), the peers on the
    nodes; combined with ``--resolve-quadrature`` or below 1 it is refused."""
    from geoattn.eval import ResolvedQuadrature

    assert race.mesh_fno_modes(6) == 1 and race.mesh_fno_modes(6, supersample=2) == 2
    models = ["mesh_fno", *[p for p in _peers() if p == "neuralop-fno"]]
    results = script.main(["--scale", "tiny", "--families", "lognormal", "--models", *models, "--supersample", "2",
                       "--modes", "4"])  # grid FNO modes 4: mesh_fno at most 2
    ops = results["lognormal"]["operators"]
    assert isinstance(ops["mesh_fno"].model, ResolvedQuadrature)
    assert ops["mesh_fno"].model.op.hparams["modes"] == 2
    train = Mesh.from_meshio(meshes.benchmark_meshes(6)["train"])
    fine = train.refined(ops["mesh_fno"].model.size)[0]
    assert fine.num_nodes == len(families.refine(meshes.benchmark_meshes(6)["train"], 1).points)
    if "neuralop-fno" in ops:
        assert not isinstance(ops["neuralop-fno"].model, ResolvedQuadrature)
    for bad in (["--supersample", "0"], ["--supersample", "2", "--resolve-quadrature"]):
        with pytest.raises(SystemExit):
            script.main(["--scale", "tiny", *bad])


def test_mixed_resolution_trains_on_both_meshes_and_scores_on_the_mesh_as_is(script, meshes, race):
    """``MixedResolution``: in training, a share ``fraction`` of the calls is the
    ResolvedQuadrature's output (on the refined mesh, read at the data's nodes), the others the
    model's on the mesh as it is; in evaluation always the latter. ``--mix-resolution`` outside
    [0, 1] or with ``--supersample`` is refused."""
    from geoattn.models import build_model
    from geoattn.operators import RefinedOperator

    mesh = Mesh.from_meshio(meshes.benchmark_meshes(6)["train"])
    x = torch.randn(mesh.num_nodes, 1)
    torch.manual_seed(0)
    model = build_model("tno", in_channels=1, out_channels=1, dim=2, width=8, depth=1)
    size = race.supersampled_size(6, supersample=2)
    resolved = RefinedOperator(model, size)
    with torch.no_grad():
        coarse, fine = model(x, mesh), resolved(x, mesh)
        assert (coarse - fine).abs().max() > 1e-4  # the two discretisations differ
        for fraction, want in ((0.0, coarse), (1.0, fine)):
            mixed = race.MixedResolution(model, size, fraction)
            torch.testing.assert_close(mixed.train()(x, mesh), want)
            torch.testing.assert_close(mixed.eval()(x, mesh), coarse)
        mixed = race.MixedResolution(model, size, 0.5).train()
        outs = [mixed(x, mesh) for _ in range(40)]
        picked_fine = sum(bool(torch.equal(o, fine)) for o in outs)
        assert sum(bool(torch.equal(o, coarse)) for o in outs) + picked_fine == 40
        assert 8 <= picked_fine <= 32  # Binomial(40, 1/2): outside with probability 2e-5
    with pytest.raises(ValueError, match="fraction"):
        race.MixedResolution(model, size, 1.5)
    results = script.main(["--scale", "tiny", "--families", "lognormal", "--models", "mesh_fno",
                           "--mix-resolution", "0.5"])
    op = results["lognormal"]["operators"]["mesh_fno"].model
    assert isinstance(op, race.MixedResolution) and op.fraction == 0.5
    for bad in (["--mix-resolution", "1.5"], ["--mix-resolution", "0.5", "--supersample", "2"]):
        with pytest.raises(SystemExit):
            script.main(["--scale", "tiny", *bad])


@pytest.mark.slow
def test_coarsened_inputs_interpolate_from_a_subset_of_the_nodes_in_training_only(script, race):
    """``CoarsenedInputs``: each subset keeps the hull's vertices and fewer nodes toward one side;
    the kept nodes keep their values and the others take the piecewise-linear interpolant of the
    kept ones, which reproduces affine inputs exactly and changes curved ones; a sample of a batch
    is coarsened with probability ``fraction``; in evaluation nothing changes, and the model's
    state holds nothing of the hook."""
    mesh = families.unit_square(12, "irregular", seed=2)
    data = from_meshio(mesh, dtype=torch.float64)
    pos, n = data.pos, len(data.pos)
    hook = race.CoarsenedInputs(1.0, least=0.1, pool=8, seed=1)
    hull = np.unique(Delaunay(pos.numpy()).convex_hull)
    mesh = Mesh(pos, data.weight, data.cells)
    for index, coeff in hook.subsets(mesh):
        kept = np.unique(index.numpy())
        assert set(hull) <= set(kept) and len(kept) < n
        np.testing.assert_allclose(coeff.sum(1).numpy(), 1.0, atol=1e-12)
        own = torch.isin(torch.arange(n), torch.as_tensor(kept))
        at_self = (coeff * (index == torch.arange(n)[:, None])).sum(1)
        torch.testing.assert_close(at_self[own], torch.ones(int(own.sum()), dtype=coeff.dtype))
        assert set(index[coeff > 0].unique().tolist()) <= set(kept.tolist())  # only kept nodes feed the others

    class Echo(torch.nn.Module):  # returns its input: the test sees what the model saw
        def forward(self, x, mesh):
            return x

    model = Echo()
    model.register_forward_pre_hook(hook)
    affine = (0.3 + 2.0 * pos[:, :1] - 1.5 * pos[:, 1:]).repeat(1, 2)
    curved = torch.sin(7 * pos[:, :1]) * torch.cos(5 * pos[:, 1:])
    torch.manual_seed(0)
    torch.testing.assert_close(model.train()(affine, mesh), affine)
    seen = model(curved, mesh)
    assert (seen - curved).abs().max() > 1e-2
    assert bool(((seen - curved).abs() < 1e-12).sum() > n // 4)  # the kept nodes keep their values
    torch.testing.assert_close(model.eval()(curved, mesh), curved)
    # a batch of three copies: each copy coarsened or not on its own draw
    hook.fraction = 0.5
    model.train()
    three = Mesh.batch([mesh, mesh, mesh])
    changed = []
    for _ in range(20):
        out = model(curved.repeat(3, 1), three)
        changed += [bool((part - curved).abs().max() > 1e-12) for part in out.split(n)]
    assert 15 <= sum(changed) <= 45  # Binomial(60, 1/2): outside with probability 1e-4
    assert not any(k for k in model.state_dict())
    with pytest.raises(ValueError, match="fraction"):
        race.CoarsenedInputs(1.5)
    results = script.main(["--scale", "tiny", "--families", "lognormal", "--models", "mesh_fno", "--coarsen", "0.5"])
    assert results["lognormal"]["models"]["mesh_fno"]["test"]["train"] > 0
    with pytest.raises(SystemExit):
        script.main(["--scale", "tiny", "--coarsen", "-0.1"])


def test_grid_fno_runs_a_batch_of_mixed_meshes_as_its_graphs_one_by_one(meshes, peers):
    """A batch whose graphs lie on different meshes (the images of one mesh under the square's
    symmetries) goes through FNO as one grid batch, and equals each graph run alone."""
    pytest.importorskip("neuralop")
    from geoattn.mesh import from_meshio
    from geoattn.mesh.symmetry import transform

    torch.manual_seed(0)
    fno = peers.GridFNO(1, 1, grid=8, modes=3, width=8, depth=1).eval()
    base = from_meshio(families.unit_square(5, "irregular", seed=0))
    base.x = torch.rand(len(base.pos), 1)
    graphs = [transform(base, g) for g in meshes.SYMMETRIES["square"][:3]] + [base]  # meshes a, b, c, a
    x, pos = torch.cat([g.x for g in graphs]), torch.cat([g.pos for g in graphs])
    batch = torch.repeat_interleave(torch.arange(4), len(base.pos))
    with torch.no_grad():
        together = fno(x, pos, torch.ones(len(pos)), batch)  # FNO reads no weights, the call needs them
        alone = torch.cat([fno(g.x, g.pos, torch.ones(len(g.pos))) for g in graphs])
    torch.testing.assert_close(together, alone, rtol=1e-5, atol=1e-6)


@pytest.mark.slow
def test_symmetries_train_on_every_image_and_score_the_average(script, meshes, race):
    """``--symmetries``: the training set is every sample on the eight images of the square's
    training mesh (checked), and each model is also scored averaged over them, which is invariant
    under the symmetries; the holed disk, which has none, is refused."""
    from geoattn.mesh.symmetry import transform
    from geoattn.operators import RefinedOperator
    from geoattn.train import SymmetrizedOperator

    models = ["mesh_fno", *[p for p in _peers() if p == "neuralop-fno"]]
    results = script.main(["--scale", "tiny", "--families", "lognormal", "--models", *models, "--symmetries",
                       "--supersample", "2", "--reference-targets"])
    res = results["lognormal"]
    for name in models:
        row = res["models"][name]
        for key in ("test", "test_reference", "test_symmetrized", "test_reference_symmetrized"):
            assert all(0 < e < 2 for e in row[key].values())
    op = res["operators"]["mesh_fno"]
    assert isinstance(op.model, RefinedOperator)  # --supersample 2
    averaged = symmetrize(op, meshes.SYMMETRIES["square"])
    assert isinstance(averaged, SymmetrizedOperator) and averaged.op is op
    sample = darcy_samples({"graded": meshes.benchmark_meshes(6)["graded"]}, 1, 0, "lognormal",
                           start=race.SCALES["tiny"].n_train)["graded"][0]
    with torch.no_grad():
        out = averaged.eval()(sample.x, Mesh.from_sample(sample))
        image = transform(sample, meshes.SYMMETRIES["square"][3])
        torch.testing.assert_close(symmetrize(op, meshes.SYMMETRIES["square"])(image.x, Mesh.from_sample(image)),
                                   out, rtol=1e-4, atol=1e-6)
    with pytest.raises(SystemExit):
        script.main(["--scale", "tiny", "--domain", "holes", "--symmetries"])


@pytest.mark.slow
def test_symmetries_with_the_resolved_quadrature_average_inside_the_refinement(script):
    """``--symmetries --resolve-quadrature`` also scores the average over the images computed on the
    refined meshes. The meshes that need no refinement (all but the graded one here) score as the
    plain average, to rounding; the graded mesh's score is the average's through the refinement."""
    results = script.main(["--scale", "tiny", "--families", "lognormal", "--models", "mesh_fno", "--symmetries",
                           "--resolve-quadrature", "--reference-targets"])
    row = results["lognormal"]["models"]["mesh_fno"]
    for key in ("test", "test_reference"):
        plain, both = row[key + "_symmetrized"], row[key + "_resolved_symmetrized"]
        resolved = row[key + "_resolved"]
        for mesh in ("train", "refined", "foreign"):  # no edge longer than the training mesh's: not refined
            assert resolved[mesh] == pytest.approx(row[key][mesh], rel=1e-6)
            assert both[mesh] == pytest.approx(plain[mesh], rel=1e-6)
        # the graded mesh is refined, and the images are averaged on the refined mesh
        assert both["graded"] != pytest.approx(plain["graded"], rel=1e-4)
        assert both["graded"] != pytest.approx(resolved["graded"], rel=1e-4)
        assert row["worst_over_train" + key[len("test"):] + "_resolved_symmetrized"] > 0


def test_validation_scores_each_model_at_its_best_epoch(script, meshes, race, tmp_path):
    import importlib.util

    # neuralop's models add entries to their state_dict that are not tensors: restoring copes
    peers = ["neuralop-fno"] if importlib.util.find_spec("neuralop") else []
    results = script.main(["--scale", "tiny", "--families", "piecewise", "--models", "mesh_fno", *peers,
                           "--epochs", "3", "--validation", "2", "--out", str(tmp_path)])
    assert all(1 <= r["best_epoch"] <= 3 for r in results["piecewise"]["models"].values())
    row = results["piecewise"]["models"]["mesh_fno"]
    assert 1 <= row["best_epoch"] <= 3 and row["val_error"] > 0
    op = results["piecewise"]["operators"]["mesh_fno"]
    domain_meshes = meshes.benchmark_meshes(race.SCALES["tiny"].mesh_n)
    val = darcy_samples({"train": domain_meshes["train"]}, 2, 0, "piecewise",
                        meshes.coefficient_field(domain_meshes),
                        start=race.SCALES["tiny"].n_train + race.SCALES["tiny"].n_test)["train"]
    from geoattn.train import evaluate_errors

    # the operator scored is the one of the best epoch: its validation error is that epoch's
    assert float(evaluate_errors(op, val).mean()) == pytest.approx(row["val_error"], rel=1e-5)
    assert "validation samples (`--validation`): mesh_fno" in (tmp_path / "table.md").read_text()


@pytest.mark.slow
def test_ensemble_trains_members_on_a_share_of_the_budget_and_scores_their_mean(script, meshes, race, tmp_path,
                                                                                 monkeypatch):
    """``--ensemble 2``: each model is the mean of two members from seeds 0 and 1, each given half
    the budget's epochs and scored at its own best epoch; the mean is what is scored, and it is
    averaged member by member under the symmetries."""
    from geoattn.train import Ensemble, evaluate_errors

    budgets = _record_budgets(race, monkeypatch, epochs=3)
    results = script.main(["--scale", "tiny", "--families", "lognormal", "--models", "mesh_fno", "--seconds", "8",
                           "--ensemble", "2", "--validation", "2", "--symmetries", "--out", str(tmp_path)])
    assert budgets == [4.0]
    row = results["lognormal"]["models"]["mesh_fno"]
    ens = results["lognormal"]["operators"]["mesh_fno"]
    assert isinstance(ens, Ensemble) and len(ens) == 2 and row["epochs"] == 3
    assert len(row["best_epochs"]) == 2 and all(1 <= b <= 3 for b in row["best_epochs"])
    domain_meshes = meshes.benchmark_meshes(race.SCALES["tiny"].mesh_n)
    test = darcy_samples(domain_meshes, race.SCALES["tiny"].n_test, 0, "lognormal",
                         meshes.coefficient_field(domain_meshes), start=race.SCALES["tiny"].n_train)
    for mesh in ("train", "graded"):
        assert float(evaluate_errors(ens, test[mesh]).mean()) == pytest.approx(row["test"][mesh], rel=1e-5)
    averaged = symmetrize(ens, meshes.SYMMETRIES["square"])
    assert isinstance(averaged, Ensemble) and len(averaged) == 2
    assert "mean of 2 members" in (tmp_path / "table.md").read_text()
    with pytest.raises(SystemExit):
        script.main(["--scale", "tiny", "--ensemble", "0"])
