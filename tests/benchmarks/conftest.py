import importlib.util
import sys
from pathlib import Path

import pytest

FOLDER = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.fixture(scope="module")
def load_script():
    """Import a script of ``benchmarks/`` by file name, as the module of that name (registered in
    ``sys.modules`` for the test module's lifetime, since dataclasses look their module up; the
    folder is on ``sys.path`` meanwhile, since scripts import their siblings)."""
    sys.path.insert(0, str(FOLDER))
    names = []

    def load(stem: str):
        spec = importlib.util.spec_from_file_location(stem, FOLDER / f"{stem}.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        names.append(spec.name)
        spec.loader.exec_module(module)
        return module

    yield load
    for name in names:
        sys.modules.pop(name, None)
    sys.path.remove(str(FOLDER))


@pytest.fixture(scope="module")
def script(request, load_script):
    """The script of ``benchmarks/`` that the test module names in its ``SCRIPT``."""
    return load_script(request.module.SCRIPT)
