import importlib.util
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_quadrature_example_shows_second_order():
    spec = importlib.util.spec_from_file_location("quadrature", ROOT / "examples" / "quadrature.py")
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    rates = example.run()
    for family, rate in rates.items():
        assert abs(rate - 2.0) < 0.25, (family, rate)
