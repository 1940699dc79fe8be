"""NVIDIA PhysicsNeMo's Transolver, imported for the comparison benchmarks on a CPU-only torch.

``from physicsnemo.models.transolver import Transolver`` imports ``physicsnemo.nn``, which imports
timm, which imports torchvision. The Transolver code itself never calls torchvision, but no
torchvision loads next to a CPU-only torch 2.13 from the package index: the wheel pinned to that
torch is a CUDA build whose extension needs ``libtorch_cuda.so`` (``RuntimeError: operator
torchvision::nms does not exist``). Installing ``nvidia-physicsnemo`` with its dependencies
instead replaces torch with a CUDA build of a newer version. So :func:`load_transolver` first tries
the plain import, and only if torchvision is missing or fails to load it imports PhysicsNeMo again
with an inert stand-in module for torchvision (every attribute a placeholder), and logs that it did.

Install, next to the CPU torch (the import-time dependencies, without their own dependencies)::

    pip install --no-deps nvidia-physicsnemo==2.2.2 timm einops jaxtyping wadler_lindig warp-lang \\
        s3fs tensordict pyvers nvtx omegaconf
    pip install aiobotocore
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import logging
import sys
from unittest import mock

log = logging.getLogger("darcy_compare")


class _InertModules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Answers every import of ``package`` and its submodules with a placeholder module."""

    def __init__(self, package: str):
        self.package = package

    def find_spec(self, name, path, target=None):
        if name == self.package or name.startswith(self.package + "."):
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec):
        module = mock.MagicMock(name=spec.name)
        module.__path__, module.__spec__, module.__name__ = [], spec, spec.name
        module.__version__ = "0+inert"
        return module

    def exec_module(self, module):
        pass


def _torchvision_failed(err: BaseException) -> bool:
    if isinstance(err, ModuleNotFoundError):
        return (err.name or "").split(".")[0] == "torchvision"
    return "torchvision" in str(err)


def load_transolver():
    """PhysicsNeMo's ``Transolver`` class, or ``None`` when PhysicsNeMo is not installed.

    Raises:
        ImportError: PhysicsNeMo is installed but fails to import for another reason than
            torchvision (the message names the missing piece).
    """
    try:
        from physicsnemo.models.transolver import Transolver
        return Transolver
    except ModuleNotFoundError as err:
        if (err.name or "").split(".")[0] == "physicsnemo":
            return None
        if not _torchvision_failed(err):
            raise
    except (RuntimeError, ImportError) as err:
        if not _torchvision_failed(err):
            raise
    for name in [n for n in sys.modules if n.split(".")[0] in ("torchvision", "timm", "physicsnemo")]:
        del sys.modules[name]  # the half-imported packages, before importing them again
    sys.meta_path.insert(0, _InertModules("torchvision"))
    log.warning("torchvision does not load with this torch: PhysicsNeMo's Transolver is imported with "
                "an inert stand-in for torchvision, which its code does not call")
    from physicsnemo.models.transolver import Transolver
    return Transolver
