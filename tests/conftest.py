import os
import pathlib
import signal

if os.environ.get("PYTEST_XDIST_WORKER"):
    # one worker per core (``-n 2`` on 2 cores): each worker computes on one thread. Several
    # threads per worker oversubscribe the cores, and OpenMP's spinning threads then stall small
    # operations by up to a scheduler slice each (a 1 s test took 50 s that way).
    for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(_var, "1")

import pytest  # noqa: E402
import torch  # noqa: E402

if os.environ.get("PYTEST_XDIST_WORKER"):
    torch.set_num_threads(1)

ROOT = pathlib.Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


@pytest.fixture
def meshes_dir() -> pathlib.Path:
    return ROOT / "meshes"


@pytest.fixture(scope="session")
def example():
    """Import a script of ``examples/`` by name: ``example("quadrature").main()``. Every example
    exposes ``main(...)`` with keyword defaults, returning the numbers it reports."""
    import importlib.util

    def load(name: str):
        spec = importlib.util.spec_from_file_location(f"examples.{name}", ROOT / "examples" / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module

    return load


@pytest.fixture(autouse=True)
def _restore_torch_threads():
    """Benchmark scripts run from the tests set torch's thread count (``--threads``); put it back
    so that no test inherits another's setting (reduction order, and so bitwise results, depend
    on it)."""
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


def _sorted(batch):
    if batch is not None:
        assert bool((batch[1:] >= batch[:-1]).all()), "the search packages need sorted batch vectors"


def _same_graph(batch_x, batch_y):
    return batch_y[:, None] == batch_x[None, :]


def capped_radius_search(x, y, r, batch_x=None, batch_y=None, max_num_neighbors=32):
    """A radius search with the contract of pyg-lib's and torch-cluster's (brute force): at most
    ``max_num_neighbors`` sources per query node in a shuffled order, a strict ``<`` in the
    inputs' dtype, sorted batch vectors only; returns ``[query, source]``."""
    _sorted(batch_x), _sorted(batch_y)
    ok = torch.cdist(y, x).square() < r * r
    if batch_x is not None:
        ok &= _same_graph(batch_x, batch_y)
    gen = torch.Generator().manual_seed(0)
    rows, cols = [], []
    for i in range(len(y)):
        js = ok[i].nonzero().flatten()
        js = js[torch.randperm(len(js), generator=gen)][:max_num_neighbors]
        rows.append(torch.full_like(js, i))
        cols.append(js)
    return torch.stack([torch.cat(rows), torch.cat(cols)])


def knn_search(x, y, k, batch_x=None, batch_y=None):
    """A kNN search with the packages' contract (brute force): fewer than ``k`` edges for a query
    node whose graph has fewer sources; returns ``[query, source]``."""
    _sorted(batch_x), _sorted(batch_y)
    d = torch.cdist(y, x)
    if batch_x is not None:
        d = d.masked_fill(~_same_graph(batch_x, batch_y), float("inf"))
    dist, idx = d.topk(min(k, len(x)), largest=False)
    query = torch.arange(len(y))[:, None].expand_as(idx)
    found = dist.isfinite()
    return torch.stack([query[found], idx[found]])


@pytest.fixture
def fake_device_search(monkeypatch):
    """Pretend torch-cluster is installed, answering with the brute-force searches above; returns
    the backend's name."""
    from geoattn.mesh import neighbor_search

    monkeypatch.setattr(neighbor_search, "_has_torch_cluster", lambda: True)
    monkeypatch.setattr(neighbor_search, "_search_fn",
                        lambda backend, op: capped_radius_search if op == "radius" else knn_search)
    return "torch-cluster"


def pytest_addoption(parser):
    parser.addoption("--slow", action="store_true",
                     help="also run the tests marked slow (the full run, which CI makes)")
    parser.addoption("--margins", metavar="DIR", default=None,
                     help="record how close every numerical check came to its tolerance into DIR "
                          "(needs -o enable_assertion_pass_hook=true; report: python tests/margins.py DIR)")


def pytest_configure(config):
    # A suite started as a background job of a shell without job control (nohup, `cmd &` in a
    # script, some CI runners) inherits SIGINT ignored, and so would every command the tests
    # start: geoattn rightly keeps an inherited ignore, and the tests of its Ctrl-C handling
    # would see no Ctrl-C. They test geoattn, not the runner's disposition: restore Python's.
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    directory = config.getoption("--margins")
    if not directory:
        return
    if not config.getini("enable_assertion_pass_hook"):
        raise pytest.UsageError("--margins needs -o enable_assertion_pass_hook=true")
    if not hasattr(config, "workerinput"):
        # Rewritten test modules cached without the assertion-pass hook would record nothing.
        for cached in ROOT.joinpath("tests").rglob("__pycache__/*pytest*.pyc"):
            cached.unlink()
    import margins

    margins.start(directory, os.environ.get("PYTEST_XDIST_WORKER", "main"))


def pytest_collection_modifyitems(config, items):
    """The default run leaves out the tests marked ``slow``; ``--slow`` runs everything."""
    if config.getoption("--slow"):
        return
    slow = [item for item in items if item.get_closest_marker("slow")]
    if slow:
        config.hook.pytest_deselected(items=slow)
        items[:] = [item for item in items if not item.get_closest_marker("slow")]


def pytest_assertion_pass(item, lineno, orig, expl):
    if item.config.getoption("--margins"):
        import margins

        margins.record_assertion(item, lineno, orig, expl)
