"""The package as people install, cite and depend on it: metadata, extras, sources."""

import pathlib
import re
import sys
import warnings

import pytest

import geoattn

ROOT = pathlib.Path(__file__).resolve().parents[1]

if sys.version_info >= (3, 11):
    import tomllib
else:
    tomllib = pytest.importorskip("tomli")

PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
#: import name -> pip package, where they differ (as geoattn.optional names them)
PIP_NAMES = {"skfem": "scikit-fem", "tqdm.auto": "tqdm", "torch_cluster": "torch-cluster",
             "neuralop": "neuraloperator"}
#: extras that install tools for people working on geoattn, not features of the package
TOOL_EXTRAS = {"test", "docs", "all"}


def _package(requirement: str) -> str:
    return re.split(r"[<>=!~;\[ ]", requirement, maxsplit=1)[0].lower()


def _sources(*folders: str) -> list[pathlib.Path]:
    return sorted(p for folder in folders for p in (ROOT / folder).rglob("*.py"))


def _imports(folders: tuple[str, ...]) -> set[str]:
    """Pip names of the packages imported (or looked for) under ``folders``."""
    found = set()
    pattern = re.compile(r'require\("([\w.]+)"|find_spec\("(\w+)"\)|^\s*(?:from|import) (\w+)', re.M)
    for path in _sources(*folders):
        for match in pattern.finditer(path.read_text()):
            name = next(g for g in match.groups() if g)
            found.add(PIP_NAMES.get(name, PIP_NAMES.get(name.split(".")[0], name.split(".")[0])))
    return found


def test_every_optional_import_names_an_extra_that_installs_it():
    text = "\n".join(p.read_text() for p in _sources("geoattn"))
    calls = re.findall(r'require\("([\w.]+)", "(\w+)"', text)
    assert calls, "geoattn imports its optional packages through geoattn.optional.require"
    extras = PROJECT["optional-dependencies"]
    for module, extra in calls:
        package = PIP_NAMES.get(module, PIP_NAMES.get(module.split(".")[0], module.split(".")[0]))
        assert extra in extras, f"require({module!r}) names the extra {extra!r}, which pyproject lacks"
        assert package in {_package(r) for r in extras[extra]}, f"[{extra}] does not install {package}"


def test_every_extra_package_is_used():
    used = _imports(("geoattn",)) | _imports(("benchmarks",))
    for extra, requirements in PROJECT["optional-dependencies"].items():
        if extra in TOOL_EXTRAS:
            continue
        for requirement in requirements:
            assert _package(requirement) in used, f"[{extra}] installs {requirement}, which nothing imports"


def test_metadata_a_user_can_cite_and_depend_on():
    assert (ROOT / "LICENSE").read_text().startswith("MIT License")
    assert PROJECT["license"] == "MIT" and PROJECT["license-files"] == ["LICENSE"]
    assert (ROOT / "geoattn" / "py.typed").exists()
    assert {"Homepage", "Source", "Issues", "Changelog"} <= set(PROJECT["urls"])
    changelog = (ROOT / "CHANGELOG.md").read_text()
    assert f"## [{geoattn.__version__}]" in changelog, "the current version has a changelog entry"
    # Classifiers name the Python versions the suite runs on, from requires-python up.
    lowest = tuple(int(v) for v in re.search(r">=\s*(\d+)\.(\d+)", PROJECT["requires-python"]).groups())
    versions = [tuple(int(v) for v in c.rsplit(":: ", 1)[1].split("."))
                for c in PROJECT["classifiers"] if re.fullmatch(r"Programming Language :: Python :: 3\.\d+", c)]
    assert versions and min(versions) == lowest


def test_every_source_file_compiles_without_warnings():
    """Invalid escapes and similar are SyntaxWarnings today and errors in a later Python."""
    for path in _sources("geoattn", "benchmarks", "examples", "tests", "meshes", "docs"):
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            compile(path.read_text(), str(path), "exec")
