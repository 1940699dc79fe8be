"""``benchmarks/patch_attention.py`` on a tiny setting (the full run is a benchmark)."""

import importlib.util
from pathlib import Path

FOLDER = Path(__file__).resolve().parents[2] / "benchmarks"


def test_patch_attention_benchmark_reports_stencils_and_times():
    spec = importlib.util.spec_from_file_location("patch_attention_benchmark", FOLDER / "patch_attention.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    rows = module.main(["--nodes", "400", "--parts", "4", "16", "--repeat", "1", "--channels", "8",
                        "--num-heads", "2"])
    assert [r["parts"] for r in rows] == [4, 16]
    for r in rows:
        assert r["version"] == "this" and r["stencils_s"] > 0
        assert all(r[k] > 0 for k in ("forward_s", "forward_cpu_s", "forward_backward_s"))
