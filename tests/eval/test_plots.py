"""Figures that do not mislead: truth and prediction on one colour scale, errors on a linear
axis from zero."""

import numpy as np
import pytest
import torch

pytest.importorskip("matplotlib")

import geoattn  # noqa: E402
from geoattn.eval import CrossMeshReport, plot_errors, plot_sample  # noqa: E402
from geoattn.eval.plots import errors_figure, sample_figure  # noqa: E402
from geoattn.mesh import MeshData  # noqa: E402


def _sample():
    g = np.linspace(0, 1, 5)
    pos = torch.tensor(np.stack(np.meshgrid(g, g, indexing="ij"), -1).reshape(-1, 2))
    cells = torch.tensor([[i * 5 + j, (i + 1) * 5 + j, (i + 1) * 5 + j + 1] for i in range(4) for j in range(4)]
                         + [[i * 5 + j, (i + 1) * 5 + j + 1, i * 5 + j + 1] for i in range(4) for j in range(4)])
    y = (pos[:, :1] + 2 * pos[:, 1:])  # truth in [0, 3]
    data = MeshData(pos=pos, x=torch.sin(pos[:, :1]), y=y, cells=cells)
    data.cell_type = "triangle"
    return data, 0.5 * y - 0.25  # a prediction in [-0.25, 1.25]: a different range than the truth


def test_truth_and_prediction_share_one_colour_scale(tmp_path):
    data, pred = _sample()
    fig = sample_figure(data, pred)
    clim = {ax.get_title(): ax.collections[0].get_clim() for ax in fig.axes if ax.get_title()}
    assert clim["truth"] == clim["prediction"] == pytest.approx((-0.25, 3.0))
    err = (pred - data.y).abs().max().item()
    assert clim["error"] == pytest.approx((-err, err))  # its own scale, centred on zero
    assert clim["input"] == pytest.approx((0.0, np.sin(1.0)))
    plot_sample(data, pred, tmp_path / "s.png")
    assert (tmp_path / "s.png").stat().st_size > 0


def test_plot_sample_refuses_a_surface():
    data, pred = _sample()
    data.pos = torch.cat([data.pos, data.pos[:, :1] ** 2], dim=1)
    with pytest.raises(geoattn.DimensionError, match="ParaView"):
        sample_figure(data, pred)


def test_errors_on_a_linear_axis_from_zero(tmp_path):
    report = CrossMeshReport(nodes={"train": 100, "refined": 400}, reference="train",
                             errors={"tno": {"train": torch.tensor([0.166]),
                                             "refined": torch.tensor([0.176])}})
    ax = errors_figure(report).axes[0]
    assert ax.get_yscale() == "linear" and ax.get_ylim()[0] == 0
    heights = sorted(p.get_height() for p in ax.patches)
    assert heights == pytest.approx([0.166, 0.176])
    assert ax.get_ylim()[1] >= 0.176
    plot_errors(report, tmp_path / "e.png")
    assert (tmp_path / "e.png").stat().st_size > 0
