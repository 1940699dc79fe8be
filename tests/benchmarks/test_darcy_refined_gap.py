"""``benchmarks/darcy_refined_gap.py``: its scores on operators whose answers are known, and a tiny run."""

import pytest
import torch

from geoattn.mesh import Mesh

SCRIPT = "darcy_refined_gap"  # the ``script`` fixture (conftest.py)


@pytest.fixture(scope="module")
def samples(script):
    meshes = script.benchmark_meshes(6)
    field = script.coefficient_field(meshes)
    test = script.solve_samples({k: meshes[k] for k in ("train", "refined")}, 3, 0, "lognormal", field)
    return test["train"], test["refined"]


def test_identity_changes_nothing_at_the_old_nodes(script, samples):
    coarse, fine = samples
    scores = script.gap(lambda x, mesh: x, coarse, fine)
    assert scores["refined vs coarse output at old nodes"] == 0.0
    # the coefficient at the new nodes is not the linear interpolant of the old ones
    assert scores["coefficient difference"] > 1e-3
    # run on the interpolated coefficient, the identity returns that interpolant, as "coarse run" does
    assert scores["coarse input"] == pytest.approx(scores["coarse run"], rel=1e-6)
    assert scores["coarse input"] != pytest.approx(scores["refined"], rel=1e-3)


def test_a_function_of_position_alone_has_no_gap_from_the_input(script, samples):
    coarse, fine = samples
    smooth = lambda x, mesh: (1 + mesh.pos[:, :1] * (1 - mesh.pos[:, 1:])).to(x.dtype)  # noqa: E731
    scores = script.gap(smooth, coarse, fine)
    assert scores["refined vs coarse output at old nodes"] == 0.0
    assert scores["coarse input"] == scores["refined"]
    # linear interpolation of a bilinear function on the coarse mesh: close to, not equal to, exact
    assert scores["coarse run"] == pytest.approx(scores["refined"], rel=0.2)
    # the old nodes' error is that of the training mesh's nodes, against the refined targets
    own = [script.relative(smooth(f.x, Mesh.from_sample(f)), f.y, f.weight, slice(0, c.num_nodes))
           for c, f in zip(coarse, fine)]
    assert scores["old nodes"] == pytest.approx(sum(own) / len(own), rel=1e-12)


def test_refuses_meshes_that_do_not_share_nodes(script, samples):
    coarse, fine = samples
    shuffled = [f.clone() for f in fine]
    for f in shuffled:
        f.pos = f.pos.flip(0)
    with pytest.raises(ValueError, match="nodes first"):
        script.gap(lambda x, pos, weight: x, coarse, shuffled)


def test_tiny_run(script, tmp_path):
    results = script.main(["--scale", "tiny", "--mesh-n", "6", "--n-train", "4", "--n-test", "2",
                           "--validation", "0", "--epochs", "1", "--out", str(tmp_path)])
    (scores,) = results.values()
    assert set(scores) == set(script.COLUMNS)
    assert all(torch.isfinite(torch.tensor(v)) for v in scores.values())
    assert (tmp_path / "results.json").exists()
