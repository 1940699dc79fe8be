"""Dataset recipes: everything that defines a generated dataset, as plain data.

A recipe names the meshes (files, or a mesh family with its arguments), the coefficient family,
the Gaussian random field, the source, the number of samples and the seed. It is read from a
small TOML file (``geoattn generate --recipe fem_data/NAME.toml``) and stored verbatim (as JSON)
inside every dataset file it produces, so a file documents how it was made.

Example::

    name = "darcy_piecewise_square"
    problem = "darcy"
    family = "piecewise"
    n = 64
    seed = 0
    grf = { preset = "cao", modes = 32 }

    [meshes.train]
    path = "../meshes/square_irregular.vtu"   # relative to the recipe file

    [meshes.fine]
    family = "unit_square"
    n = 32
    kind = "irregular"
    refine = 2
"""

from __future__ import annotations

import json
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

import meshio

from ..mesh import families
from .grf import GaussianRandomField, preset

_MESH_FAMILIES = {"unit_square": families.unit_square, "unit_cube": families.unit_cube,
                  "l_shape": families.l_shape}


@dataclass
class Recipe:
    """A Darcy dataset recipe (see the module docstring for the TOML form).

    Args:
        meshes: mesh specifications by name: ``{"path": FILE}`` or ``{"family": NAME, ...kwargs,
            "refine": times}`` with ``NAME`` one of ``unit_square``, ``unit_cube``, ``l_shape``.
        n: number of samples.
        seed: stream seed (sample ``i`` depends only on ``(seed, i)``).
        family: coefficient family, ``"piecewise"`` or ``"lognormal"``.
        grf: field parameters: ``{"preset": NAME, **overrides}`` or the keyword arguments of
            :class:`~geoattn.data.grf.GaussianRandomField`.
        f: constant source term.
        name: a label.
        problem: the PDE; only ``"darcy"`` for now.
    """

    meshes: dict[str, dict]
    n: int
    seed: int = 0
    family: str = "piecewise"
    grf: dict = field(default_factory=lambda: {"preset": "cao"})
    f: float = 1.0
    name: str = "darcy"
    problem: str = "darcy"

    def __post_init__(self):
        if self.problem != "darcy":
            raise ValueError(f"unknown problem {self.problem!r}; only 'darcy' is available")
        if not self.meshes:
            raise ValueError("a recipe needs at least one mesh")
        if self.n < 1 or self.seed < 0:
            raise ValueError(f"need n >= 1 and seed >= 0, got n={self.n}, seed={self.seed}")
        for name, spec in self.meshes.items():
            if ("path" in spec) == ("family" in spec):
                raise ValueError(f"mesh {name!r} needs exactly one of 'path' or 'family', got {spec}")

    def field(self) -> GaussianRandomField:
        """The Gaussian random field of the recipe."""
        kwargs = dict(self.grf)
        name = kwargs.pop("preset", None)
        return preset(name, **kwargs) if name else GaussianRandomField(**kwargs)

    def load_meshes(self, base: Path | None = None) -> dict[str, meshio.Mesh]:
        """Build or read the meshes; relative paths resolve against ``base`` (the recipe's
        folder) when given, else against the working directory."""
        out = {}
        for name, spec in self.meshes.items():
            spec = dict(spec)
            times = int(spec.pop("refine", 0))
            if "path" in spec:
                path = Path(spec["path"])
                if base is not None and not path.is_absolute():
                    path = Path(base) / path
                if not path.exists():
                    raise FileNotFoundError(f"mesh {name!r}: file {spec['path']} not found")
                mesh = meshio.read(path)
            else:
                fam = spec.pop("family")
                if fam not in _MESH_FAMILIES:
                    raise ValueError(f"mesh {name!r}: unknown family {fam!r}; choose one of "
                                     f"{sorted(_MESH_FAMILIES)}")
                mesh = _MESH_FAMILIES[fam](**spec)
            out[name] = families.refine(mesh, times) if times else mesh
        return out

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> Recipe:
        return cls(**json.loads(text))


def load_recipe(path: str | Path) -> Recipe:
    """Read a recipe from a TOML file."""
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - Python 3.10
        try:
            import tomli as tomllib
        except ImportError as err:
            raise ImportError("reading TOML recipes on Python 3.10 needs: pip install tomli") from err
    with open(path, "rb") as fh:
        data = tomllib.load(fh)
    try:
        return Recipe(**data)
    except TypeError as err:
        raise ValueError(f"{path}: invalid recipe ({err})") from err


__all__ = ["Recipe", "load_recipe"]
