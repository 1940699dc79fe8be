"""``benchmarks/bad_inputs.py``: every case of issue 56's "Why" answered in one line, the page in
the results layout, naming no folder of the machine that ran it."""

import pytest

SCRIPT = "bad_inputs"  # the ``script`` fixture (conftest.py)


def test_it_takes_docs(script, capsys):
    with pytest.raises(SystemExit) as exit_:
        script.main(["--help"])
    assert exit_.value.code == 0 and "--docs PATH" in capsys.readouterr().out


@pytest.mark.slow
def test_a_small_run_answers_every_case_and_writes_its_page(script, tmp_path, capsys):
    page = tmp_path / "bad_inputs.md"
    results = script.main(["--train", "16", "--test", "4", "--sigterm-tries", "1", "--docs", str(page)])
    rows = results["rows"]
    assert len(rows) >= 40
    for group, case, rc, message in rows:
        assert message and "\n" not in message and "Traceback" not in message, (case, message)
        assert rc in ("-", "0", "2", "143"), (case, rc)
        assert str(tmp_path) not in message and "/work/" not in message, (case, message)
    by_case = {case: (rc, message) for _, case, rc, message in rows}
    assert by_case["`mesh_fno(period=True)`"][1].startswith("ConfigError: period must be a real number")
    sigterm = next(v for k, v in by_case.items() if "SIGTERM" in k)
    assert sigterm[0] == "143" and "(2 of 2 runs)" in sigterm[1], sigterm
    steps = results["multigrid"]["steps"]
    assert [s["rc"] for s in steps] == [0, 0, 0, 0, 2, 2]
    assert 0 < results["multigrid"]["test_error"] < 2
    text = page.read_text()
    assert text.startswith("# Bad inputs") and "Written by: `python benchmarks/bad_inputs.py --train 16" in text
    assert "## The multigrid on [0, 2] x [0, 1]" in text
