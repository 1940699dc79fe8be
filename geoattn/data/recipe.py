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
import math
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

import meshio

from ..errors import ConfigError
from ..mesh import families
from ..mesh.io import read_meshio
from ..mesh.validation import located
from .darcy import FAMILIES
from .grf import GaussianRandomField, preset

_MESH_FAMILIES = {"unit_square": families.unit_square, "unit_cube": families.unit_cube,
                  "l_shape": families.l_shape}
#: Largest ``refine`` of a mesh: each refinement multiplies the cells by ``2^d``.
MAX_REFINE = 8
#: Largest number of random coefficients per sample (the product of the GRF ``modes``).
MAX_GRF_COEFFICIENTS = 2**22
_INT64 = 2**63


def _check_int(what: str, value, low: int, high: int = _INT64) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value < high:
        upper = "2**63 - 1" if high == _INT64 else high - 1
        raise ConfigError(f"{what} must be an integer in [{low}, {upper}], got {value!r}")


def _check_mesh_spec(name, spec) -> None:
    if not isinstance(name, str) or not name or "/" in name:
        raise ConfigError(f"mesh names must be non-empty strings without '/', got {name!r}")
    if not isinstance(spec, dict):
        raise ConfigError(f"mesh {name!r} must be a table ({{path = FILE}} or {{family = NAME, ...}}), "
                          f"got {spec!r}")
    if ("path" in spec) == ("family" in spec):
        raise ConfigError(f"mesh {name!r} needs exactly one of 'path' or 'family', got {spec}")
    if "path" in spec and (not isinstance(spec["path"], str) or not spec["path"]):
        raise ConfigError(f"mesh {name!r}: path must be a file name, got {spec['path']!r}")
    if "family" in spec and spec["family"] not in _MESH_FAMILIES:
        raise ConfigError(f"mesh {name!r}: unknown family {spec['family']!r}; choose one of "
                          f"{sorted(_MESH_FAMILIES)}")
    _check_int(f"mesh {name!r}: refine", spec.get("refine", 0), 0, MAX_REFINE + 1)


def _field(grf: dict) -> GaussianRandomField:
    kwargs = dict(grf)
    return preset(kwargs.pop("preset"), **kwargs) if "preset" in kwargs else GaussianRandomField(**kwargs)


def _checked_field(grf) -> GaussianRandomField:
    """The field of ``grf``, its size checked before it is built (huge ``modes`` would exhaust
    memory); every error is a :class:`~geoattn.errors.ConfigError`."""
    if not isinstance(grf, dict):
        raise ConfigError(f"grf must be a table such as {{preset = 'cao', modes = 32}}, got {grf!r}")
    modes = grf.get("modes", 1)
    axes = list(modes) if isinstance(modes, (list, tuple)) else [modes]
    for m in axes:
        _check_int("grf modes", m, 1, MAX_GRF_COEFFICIENTS + 1)
    try:
        dim = _field({**grf, "modes": 1}).dim  # every other parameter, checked cheaply
    except (TypeError, ValueError) as err:
        raise ConfigError(f"grf {grf}: {err}") from err
    if (math.prod(axes) if isinstance(modes, (list, tuple)) else modes**dim) > MAX_GRF_COEFFICIENTS:
        raise ConfigError(f"grf modes {modes} in {dim}-D give more than {MAX_GRF_COEFFICIENTS} "
                          "random coefficients per sample; use fewer modes")
    try:
        return _field(grf)
    except (TypeError, ValueError) as err:
        raise ConfigError(f"grf {grf}: {err}") from err


@dataclass
class Recipe:
    """A Darcy dataset recipe (see the module docstring for the TOML form).

    Every entry is checked when the recipe is made (types, ranges, the field's parameters), so a
    bad recipe raises :class:`~geoattn.errors.ConfigError` before anything is generated.

    Args:
        meshes: mesh specifications by name: ``{"path": FILE}`` or ``{"family": NAME, ...kwargs,
            "refine": times}`` with ``NAME`` one of ``unit_square``, ``unit_cube``, ``l_shape``
            and ``0 <= times <=`` :data:`MAX_REFINE`.
        n: number of samples.
        seed: stream seed (sample ``i`` depends only on ``(seed, i)``).
        family: coefficient family, ``"piecewise"`` or ``"lognormal"``.
        grf: field parameters: ``{"preset": NAME, **overrides}`` or the keyword arguments of
            :class:`~geoattn.data.grf.GaussianRandomField`, with at most
            :data:`MAX_GRF_COEFFICIENTS` modes in all.
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
            raise ConfigError(f"unknown problem {self.problem!r}; only 'darcy' is available")
        if not isinstance(self.meshes, dict) or not self.meshes:
            raise ConfigError(f"a recipe needs at least one mesh (a table by name), got {self.meshes!r}")
        for name, spec in self.meshes.items():
            _check_mesh_spec(name, spec)
        _check_int("n", self.n, 1)
        _check_int("seed", self.seed, 0)
        if self.family not in FAMILIES:
            raise ConfigError(f"unknown coefficient family {self.family!r}; choose one of {sorted(FAMILIES)}")
        if isinstance(self.f, bool) or not isinstance(self.f, (int, float)) or not math.isfinite(self.f):
            raise ConfigError(f"f must be a finite number, got {self.f!r}")
        if not isinstance(self.name, str) or not self.name:
            raise ConfigError(f"name must be a non-empty string, got {self.name!r}")
        _checked_field(self.grf)

    def field(self) -> GaussianRandomField:
        """The Gaussian random field of the recipe."""
        return _field(self.grf)

    def load_meshes(self, base: Path | None = None) -> dict[str, meshio.Mesh]:
        """Build or read the meshes; relative paths resolve against ``base`` (the recipe's
        folder) when given, else against the working directory.

        Raises:
            FileNotFoundError: a mesh file is missing.
            MeshFileError: a mesh file cannot be read (named with its mesh).
            ConfigError: a mesh family rejects its arguments.
        """
        out = {}
        for name, spec in self.meshes.items():
            spec = dict(spec)
            times = spec.pop("refine", 0)
            if "path" in spec:
                path = Path(spec["path"])
                if base is not None and not path.is_absolute():
                    path = Path(base) / path
                if not path.exists():
                    raise FileNotFoundError(f"mesh {name!r}: file {spec['path']} not found")
                with located(f"mesh {name!r}"):
                    mesh = read_meshio(path)
            else:
                try:
                    mesh = _MESH_FAMILIES[spec.pop("family")](**spec)
                except (TypeError, ValueError) as err:
                    raise ConfigError(f"mesh {name!r}: {err}") from err
            out[name] = families.refine(mesh, times) if times else mesh
        return out

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> Recipe:
        return cls(**json.loads(text))


def load_recipe(path: str | Path) -> Recipe:
    """Read a recipe from a TOML file.

    Raises:
        FileNotFoundError: no file at ``path``.
        ConfigError: the file cannot be read, is not TOML, or is not a valid recipe.
    """
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - Python 3.10
        try:
            import tomli as tomllib
        except ImportError as err:
            raise ImportError("reading TOML recipes on Python 3.10 needs: pip install tomli") from err
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"recipe file {path} not found")
    try:
        with open(path, "rb") as fh:
            data = tomllib.load(fh)
    except OSError as err:
        raise ConfigError(f"cannot read recipe {path} ({err.strerror or err})") from err
    except ValueError as err:  # TOMLDecodeError, UnicodeDecodeError
        raise ConfigError(f"{path} is not a TOML recipe ({err})") from err
    with located(str(path)):
        try:
            return Recipe(**data)
        except TypeError as err:
            raise ConfigError(f"invalid recipe ({err})") from err


__all__ = ["Recipe", "load_recipe"]
