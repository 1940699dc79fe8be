"""``benchmarks/vit_transfer.py`` on a tiny setting (the full run is a benchmark)."""

import math
import re


def test_vit_transfer_tabulates_every_column_over_seeds(load_script, tmp_path, capsys):
    """Two seeds of the exact-lift variant and of the token design: on the training mesh every
    column but ``vs fine`` (the error against the finer mesh's targets) is the training-mesh
    error itself (ratio 1, the latent mesh's interpolations being the identity up to float32
    rounding), each ratio is the mean over the seeds and lies in their range, the columns that
    swap ViT-NO's nodal lift coefficients are empty for the token design, the page is written,
    and ``--split`` prints four classes of the refined mesh's nodes whose counts add up (the
    training mesh's 49 nodes among its 169)."""
    module = load_script("vit_transfer")
    page = tmp_path / "vit.md"
    rows = module.main(["--mesh-n", "6", "--n-train", "4", "--n-test", "2", "--epochs", "1", "--width", "8",
                        "--variants", "P4p1", "tok", "--seeds", "0", "1", "--split", "0.15",
                        "--docs", str(page)])
    assert [(name, kw["quadrature"]) for name, kw, _ in rows] == [("P4p1", "p1"), ("tok", "tokens")]
    for name, kw, res in rows:
        assert set(res) == {"train", "refined", "graded", "foreign"}
        for col in module.COLS:
            if col == "vs fine" or (name == "tok" and col.startswith("coef@")):
                continue
            assert abs(res["train"][col] - 1.0) < 1e-5, (name, col)
        for mesh, r in res.items():
            assert r["vs fine"] > 0
            for col in module.COLS:
                lo, hi = r["range"][col]
                if name == "tok" and col.startswith("coef@"):
                    assert math.isnan(r[col])
                    continue
                assert lo - 1e-12 <= r[col] <= hi + 1e-12, (mesh, col)
    text = page.read_text()
    assert "| P4p1 | vit | p1 | 4 | 2 | graded |" in text and "| tok | vit | tokens | 4 | 2 | graded |" in text
    assert "latent" in text and "vs fine" in text
    # --split: the refined mesh's nodes in four classes, the training mesh's own nodes among them
    counts = {}
    for line in capsys.readouterr().out.splitlines():
        if line.startswith("tok seed 0 split"):
            counts = {k: int(n) for k, n in re.findall(r"(\w+(?: \w+)?) [0-9.nan]+ \((\d+)\)", line.split(":", 1)[1])}
    assert counts["old seam"] + counts["old in"] == counts["train_seam"] + counts["train_in"] == 49
    assert sum(counts[k] for k in ("old seam", "old in", "new seam", "new in")) == 169
