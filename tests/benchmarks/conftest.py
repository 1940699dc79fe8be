import importlib.util
import sys
from pathlib import Path

import pytest

FOLDER = Path(__file__).resolve().parents[2] / "benchmarks"
# The problem generators of the scripts (benchmarks/problems) are imported as ``problems.*`` by the
# test modules here, at collection already: the folder stays on sys.path (last, so that it shadows
# nothing installed).
if str(FOLDER) not in sys.path:
    sys.path.append(str(FOLDER))


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


class Cut(Exception):
    """A run cut off between epochs."""


@pytest.fixture
def run_trainer(script, monkeypatch):
    """Choose the Trainer that ``benchmarks/runs.py`` trains with: ``run_trainer("cut")`` stops
    every run at the start of its second epoch (raising ``run_trainer.Cut``), ``"none"`` fails on
    any training (a finished model must not be trained again), ``"real"`` puts the real one back."""
    runs = sys.modules["runs"]
    real = runs.Trainer

    class CutTrainer(real):
        def fit(self, train, val=None, resume=False, on_step=None):
            def cut(epoch, step):
                if epoch == 1:
                    raise Cut
            return super().fit(train, val, resume, on_step=cut)

    class NoTrainer(real):
        def fit(self, *args, **kwargs):
            raise AssertionError("a finished model was trained again")

    kinds = {"cut": CutTrainer, "none": NoTrainer, "real": real}

    def use(kind: str) -> None:
        monkeypatch.setattr(runs, "Trainer", kinds[kind])

    use.Cut = Cut
    return use
