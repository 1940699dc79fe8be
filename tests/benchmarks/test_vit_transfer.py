"""``benchmarks/vit_transfer.py`` on a tiny setting (the full run is a benchmark)."""


def test_vit_transfer_tabulates_every_column_over_seeds(load_script, tmp_path):
    """Two seeds of one variant: on the training mesh every column is the training-mesh error
    itself (ratio 1, the latent mesh's interpolations being the identity up to float32 rounding),
    each ratio is the mean over the seeds and lies in their range, and the page is written."""
    module = load_script("vit_transfer")
    page = tmp_path / "vit.md"
    rows = module.main(["--mesh-n", "6", "--n-train", "4", "--n-test", "2", "--epochs", "1", "--width", "8",
                        "--variants", "P4p1", "--seeds", "0", "1", "--docs", str(page)])
    (name, kw, res), = rows
    assert name == "P4p1" and kw["quadrature"] == "p1"
    assert set(res) == {"train", "refined", "graded", "foreign"}
    for col in module.COLS:
        assert abs(res["train"][col] - 1.0) < 1e-5, col
    for mesh, r in res.items():
        for col in module.COLS:
            lo, hi = r["range"][col]
            assert lo - 1e-12 <= r[col] <= hi + 1e-12, (mesh, col)
    text = page.read_text()
    assert "| P4p1 | 4 | 2 | graded |" in text and "latent" in text
