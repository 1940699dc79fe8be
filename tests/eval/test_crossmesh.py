"""The cross-mesh report: weighted relative errors per mesh, ratios, table and CSV."""

import csv

import pytest
import torch
from torch import nn
from torch_geometric.data import Data

from geoattn.eval import CrossMeshReport, cross_mesh_report


class _Scaled(nn.Module):
    """Predicts ``x * (1 + a * pos_0)``: relative error ``|a| ||x pos_0|| / ||x||`` in L2(D)."""

    def __init__(self, a: float):
        super().__init__()
        self.a = nn.Parameter(torch.tensor(float(a)))

    def forward(self, x, mesh):
        return x * (1 + self.a * mesh.pos[:, :1])


def _samples(n: int, count: int, seed: int) -> list[Data]:
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(count):
        pos = torch.rand(n, 2, generator=g, dtype=torch.float64)
        weight = torch.rand(n, generator=g, dtype=torch.float64) + 0.1
        x = torch.rand(n, 1, generator=g, dtype=torch.float64) + 0.5
        out.append(Data(x=x, y=x.clone(), pos=pos, weight=weight))
    return out


def _expected(a: float, d: Data) -> float:
    num = (d.weight * (a * d.x[:, 0] * d.pos[:, 0]) ** 2).sum()
    return float(torch.sqrt(num / (d.weight * d.x[:, 0] ** 2).sum()))


def test_report_is_the_weighted_relative_error_of_every_sample(tmp_path):
    datasets = {"train": _samples(12, 3, 0), "fine": _samples(40, 3, 1)}
    ops = {"a": _Scaled(0.5).double(), "b": _Scaled(-2.0).double()}
    report = cross_mesh_report(ops, datasets, batch_size=2)
    assert report.reference == "train" and report.nodes == {"train": 12, "fine": 40}
    for name, a in (("a", 0.5), ("b", -2.0)):
        for mesh, samples in datasets.items():
            expected = torch.tensor([_expected(a, d) for d in samples], dtype=torch.float64)
            assert torch.allclose(report.errors[name][mesh].double(), expected, rtol=1e-12)
        ratio = report.mean(name, "fine") / report.mean(name, "train")
        assert report.ratio(name, "fine") == pytest.approx(ratio)
        assert report.ratio(name, "train") == pytest.approx(1.0)
    # model b is four times model a on every sample
    assert report.mean("b", "fine") == pytest.approx(4 * report.mean("a", "fine"))
    lines = report.table().splitlines()
    assert len(lines) == 2 + len(datasets) and "a rel L2" in lines[0] and "b rel L2" in lines[0]
    report.write_csv(tmp_path / "r.csv")
    rows = list(csv.DictReader(open(tmp_path / "r.csv")))
    assert len(rows) == 4 and {r["mesh"] for r in rows} == {"train", "fine"}
    row = next(r for r in rows if r["model"] == "a" and r["mesh"] == "fine")
    assert float(row["mean"]) == pytest.approx(report.mean("a", "fine"), rel=1e-5)
    assert float(row["ratio"]) == pytest.approx(report.ratio("a", "fine"), rel=1e-3)


def test_report_rejects_bad_arguments():
    datasets = {"train": _samples(5, 1, 0)}
    with pytest.raises(ValueError, match="no datasets"):
        cross_mesh_report({"a": _Scaled(1.0)}, {})
    with pytest.raises(ValueError, match="reference mesh"):
        cross_mesh_report({"a": _Scaled(1.0).double()}, datasets, reference="other")
    with pytest.raises(ValueError, match="non-finite"):
        cross_mesh_report({"nan": _Scaled(float("nan")).double()}, datasets)


def test_reference_other_than_the_first_mesh():
    report = CrossMeshReport({"m1": 3, "m2": 4}, "m2")
    report.errors["x"] = {"m1": torch.tensor([2.0, 4.0]), "m2": torch.tensor([1.0, 1.0])}
    assert report.mean("x", "m1") == 3.0 and report.ratio("x", "m1") == 3.0
