"""Import cost of the package: time and modules loaded by ``import geoattn.models`` (and others).

Each measurement runs in a fresh interpreter that has already imported torch and torch_geometric
(the unavoidable base), so the figure is what geoattn itself adds. Run
``python benchmarks/imports.py`` (``--source DIR`` measures another checkout of the package).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys

HEAVY = ("skfem", "meshio", "h5py", "matplotlib", "pymetis")

_PROBE = """
import sys, time, json
if {source!r}:
    sys.path.insert(0, {source!r})
import torch, torch_geometric
before = set(sys.modules)
tic = time.perf_counter()
import {module}
seconds = time.perf_counter() - tic
new = [m for m in sys.modules if m not in before]
print(json.dumps({{"seconds": seconds, "modules": len(new),
                   "geoattn_modules": sum(m.startswith("geoattn") for m in new),
                   "heavy": [m for m in {heavy!r} if m in sys.modules]}}))
"""


def measure(module: str, source: str | None = None, repeat: int = 5) -> dict:
    """Median import time of ``module`` over ``repeat`` fresh interpreters, and what it loads."""
    runs = []
    for _ in range(repeat):
        code = _PROBE.format(source=source or "", module=module, heavy=HEAVY)
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                             cwd="/" if source else None)
        runs.append(json.loads(out.stdout))
    return {**runs[-1], "seconds": statistics.median(r["seconds"] for r in runs)}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", help="folder holding the geoattn package to measure")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args(argv)
    results = {}
    for module in ("geoattn", "geoattn.nn", "geoattn.models", "geoattn.train"):
        r = results[module] = measure(module, args.source, args.repeat)
        print(f"import {module:<16} {r['seconds']:.3f} s  {r['modules']:4d} new modules "
              f"({r['geoattn_modules']} of geoattn)  heavy: {', '.join(r['heavy']) or 'none'}")
    return results


if __name__ == "__main__":
    main()
