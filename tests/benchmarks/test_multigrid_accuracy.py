"""The multigrid accuracy benchmark's hybrid loss (``benchmarks/multigrid_accuracy.py``): the
variant syntax and a tiny run end to end (the split and the loss are the library's,
:mod:`geoattn.train.between_nodes`, tested in ``tests/train/test_between_nodes.py``)."""

import pytest

SCRIPT = "multigrid_accuracy"


@pytest.fixture
def acc(load_script):
    pytest.importorskip("neuralop")
    return load_script(SCRIPT)


def test_variant_syntax(acc):
    assert acc.parse("hybrid@0.25") == ("hybrid", None, 0.25)
    assert acc.parse("hybrid@1:1,2") == ("hybrid", (1, 2), 1.0)
    assert acc.parse("nodes") == ("nodes", None, None)
    with pytest.raises(ValueError):
        acc.parse("hybrid")  # the weight is required
    with pytest.raises(ValueError):
        acc.parse("query@1")  # and only the hybrid takes one


def test_tiny_hybrid_run(acc, tmp_path):
    runs = acc.main(["--scale", "tiny", "--variants", "nodes", "hybrid@0.25", "--seeds", "0", "--epochs", "1",
                     "--out", str(tmp_path)])
    assert [(r["mode"], r["lambda"]) for r in runs] == [("nodes", None), ("hybrid", 0.25)]
    assert (tmp_path / "hybrid0.25-s0.json").exists()
    for r in runs:
        assert r["epochs"] == 1 and all(0 < e < 10 for e in r["test"].values())
    assert "hybrid, λ=0.25" in acc.table(runs)
