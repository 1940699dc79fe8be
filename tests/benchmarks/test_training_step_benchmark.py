"""Smoke test of benchmarks/training_step.py: every pipeline variant trains on the same batches."""


def test_pipeline_variants_train_to_the_same_error(load_script, tmp_path):
    script = load_script("training_step")
    results = script.main(["--scale", "tiny", "--threads", "1", "--parts", "pipeline", "--out", str(tmp_path)])
    for name, rows in results["pipeline"].items():
        errors = {label: row["train_error"] for label, row in rows.items()}
        # the mesh's memo, the lazy file and the workers change where the work happens, not the result
        assert max(errors.values()) - min(errors.values()) < 1e-6, (name, errors)
        assert all(row["ms_per_step"] > 0 for row in rows.values())
    assert (tmp_path / "results.json").exists() and "vs rebuilt" in (tmp_path / "table.txt").read_text()
