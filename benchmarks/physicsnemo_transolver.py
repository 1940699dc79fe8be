"""NVIDIA PhysicsNeMo's Transolver, imported for the comparison benchmarks on a CPU-only torch.

``from physicsnemo.models.transolver import Transolver`` imports ``physicsnemo.nn``, which imports
timm, which imports torchvision. The Transolver code itself never calls torchvision, but no
torchvision loads next to a CPU-only torch 2.13 from the package index: the wheel pinned to that
torch is a CUDA build whose extension needs ``libtorch_cuda.so`` (``RuntimeError: operator
torchvision::nms does not exist``). Installing ``nvidia-physicsnemo`` with its dependencies
instead replaces torch with a CUDA build of a newer version. So :func:`load_transolver` first tries
the plain import, and only if a package of :data:`STAND_INS` (torchvision; warp-lang, a 150 MB
wheel serving PhysicsNeMo's finite-difference kernels; s3fs, for remote files) is missing or fails
to load it imports PhysicsNeMo again with an inert stand-in module for it (every attribute a
placeholder), and logs which ones it used. On the GPU machines, where torchvision loads, warp and
s3fs were the stand-ins.

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


#: Packages PhysicsNeMo imports that Transolver's code never calls: each is replaced by an inert
#: stand-in when it is missing or fails to load (torchvision: see above; warp-lang, a 150 MB wheel,
#: serves PhysicsNeMo's finite-difference kernels only).
STAND_INS = ("torchvision", "warp", "s3fs")


def _stand_in_needed(err: BaseException) -> str | None:
    """The package of :data:`STAND_INS` whose absence or failure ``err`` reports, else ``None``."""
    if isinstance(err, ModuleNotFoundError):
        name = (err.name or "").split(".")[0]
        return name if name in STAND_INS else None
    return next((name for name in STAND_INS if f"{name}::" in str(err) or f"'{name}'" in str(err)), None)


def load_transolver():
    """PhysicsNeMo's ``Transolver`` class, or ``None`` when PhysicsNeMo is not installed.

    Raises:
        ImportError: PhysicsNeMo is installed but fails to import for another reason than a
            package of :data:`STAND_INS` (the message names the missing piece).
    """
    stood_in = []
    while True:
        try:
            from physicsnemo.models.transolver import Transolver
            break
        except (RuntimeError, ImportError) as err:
            if isinstance(err, ModuleNotFoundError) and (err.name or "").split(".")[0] == "physicsnemo":
                return None
            package = _stand_in_needed(err)
            if package is None or package in stood_in:
                raise
        for name in [n for n in sys.modules if n.split(".")[0] in ("physicsnemo", "timm", *STAND_INS)
                     and n.split(".")[0] not in stood_in]:
            del sys.modules[name]  # the half-imported packages, before importing them again
        sys.meta_path.insert(0, _InertModules(package))
        stood_in.append(package)
    if stood_in:
        log.warning("PhysicsNeMo's Transolver is imported with inert stand-ins for %s, which its code does "
                    "not call (missing or failing to load here)", ", ".join(stood_in))
    return Transolver
