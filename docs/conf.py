"""Sphinx configuration for the geoattn documentation."""

import geoattn

project = "geoattn"
author = "the geoattn developers"
copyright = "2026, the geoattn developers"
release = version = geoattn.__version__

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.mathjax",
    "sphinx.ext.napoleon",
    "sphinx.ext.viewcode",
]
autosummary_generate = True
autodoc_default_options = {"members": True, "show-inheritance": True}
autodoc_member_order = "bysource"
autodoc_typehints = "description"
napoleon_google_docstring = True
napoleon_custom_sections = [("Shapes", "params_style")]
exclude_patterns = ["_build"]
html_theme = "alabaster"
nitpicky = False
suppress_warnings = ["autosummary.import_cycle"]

# The benchmark results pages (docs/results/*.md) are markdown in one fixed layout: MyST reads
# them where it is installed, a small converter (docs/_ext/results_markdown.py) otherwise.
import importlib.util  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

if importlib.util.find_spec("myst_parser") is not None:
    extensions.append("myst_parser")
    source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
else:
    sys.path.insert(0, str(Path(__file__).parent / "_ext"))
    extensions.append("results_markdown")
