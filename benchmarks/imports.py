"""Import cost of the package: time and modules loaded by ``import geoattn.models`` (and others).

Each measurement runs in a fresh interpreter that has already imported torch and torch_geometric
(the unavoidable base), so the figure is what geoattn itself adds. Run
``python benchmarks/imports.py`` (``--source DIR`` measures another checkout of the package).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time

from results_page import add_docs_argument, markdown_table, write_page

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
    add_docs_argument(parser)
    args = parser.parse_args(argv)
    load = os.getloadavg()
    results = {}
    for module in ("geoattn", "geoattn.nn", "geoattn.models", "geoattn.train"):
        r = results[module] = measure(module, args.source, args.repeat)
        print(f"import {module:<16} {r['seconds']:.3f} s  {r['modules']:4d} new modules "
              f"({r['geoattn_modules']} of geoattn)  heavy: {', '.join(r['heavy']) or 'none'}")
    if args.docs:
        write_page(args.docs, "Import cost (`benchmarks/imports.py`)",
                   " ".join(["python", "benchmarks/imports.py", *(sys.argv[1:] if argv is None else argv)]),
                   markdown_table(["`import ...`", "time", "new modules", "of geoattn", "heavy packages loaded"],
                                  [[f"`{m}`", f"{r['seconds']:.2f} s", r["modules"], r["geoattn_modules"],
                                    ", ".join(r["heavy"]) or "none"] for m, r in results.items()]),
                   f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, Python "
                   f"{platform.python_version()}, load average (1 min) {load[0]:.1f}–{os.getloadavg()[0]:.1f}; "
                   f"recorded {time.strftime('%Y-%m-%d')}",
                   notes=f"Median of {args.repeat} fresh interpreters that have already imported torch and "
                         "torch_geometric" + (f"; the package from `{args.source}`." if args.source else "."))
    return results


if __name__ == "__main__":
    main()
