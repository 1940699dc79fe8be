"""A PyG Data or Batch passed to a model or operator is refused in one line naming the call."""

import pytest
import torch
from torch_geometric.data import Batch, Data

from geoattn.mesh import Mesh
from geoattn.models import TNO
from geoattn.operators import NormalizedOperator


def test_a_pyg_batch_is_refused_with_the_call_to_make():
    model = TNO(in_channels=1, out_channels=1, dim=2, width=8, depth=1)
    g = torch.Generator().manual_seed(0)
    sample = Data(x=torch.rand(10, 1, generator=g), pos=torch.rand(10, 2, generator=g),
                  weight=torch.full((10,), 0.1))
    batch = Batch.from_data_list([sample, sample])
    for op in (model, NormalizedOperator(model)):
        for args in ((batch,), (batch.x, batch), (sample,)):
            with pytest.raises(TypeError, match=r"op\(batch.x, Mesh.from_sample\(batch\)\)") as err:
                op(*args)
            assert "\n" not in str(err.value)
    expected = torch.cat([model(sample.x, Mesh.from_sample(sample))] * 2)
    torch.testing.assert_close(model(batch.x, Mesh.from_sample(batch)), expected)
