import pathlib

import pytest
import torch

ROOT = pathlib.Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


@pytest.fixture
def meshes_dir() -> pathlib.Path:
    return ROOT / "meshes"


@pytest.fixture(scope="session")
def example():
    """Import a script of ``examples/`` by name: ``example("quadrature").main()``. Every example
    exposes ``main(...)`` with keyword defaults, returning the numbers it reports."""
    import importlib.util

    def load(name: str):
        spec = importlib.util.spec_from_file_location(f"examples.{name}", ROOT / "examples" / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module

    return load


@pytest.fixture(autouse=True)
def _restore_torch_threads():
    """Benchmark scripts run from the tests set torch's thread count (``--threads``); put it back
    so that no test inherits another's setting (reduction order, and so bitwise results, depend
    on it)."""
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)
