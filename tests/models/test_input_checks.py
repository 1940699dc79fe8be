"""Every field-to-field model refuses a mesh of the wrong dimension and a field with the wrong
number of channels, naming what it was built for."""

import pytest
import torch

from geoattn.models import build_model
from geoattn.testing import assert_rejects_mismatched_inputs

SMALL = {
    "tno": {"width": 8, "depth": 1},
    "galerkin": {"width": 8, "depth": 1},
    "gno": {"width": 8, "depth": 1},
    "vit": {"width": 8, "depth": 1, "num_heads": 2, "num_patches": 2, "modes": 1},
    "fano": {"width": 8, "depth": 1, "num_heads": 2, "num_patches": 2, "modes": 1},
}


@pytest.mark.parametrize("name", sorted(SMALL))
@pytest.mark.parametrize("in_channels, dim", [(2, 2), (1, 3)])
def test_model_rejects_mismatched_inputs(name, in_channels, dim):
    torch.manual_seed(0)
    model = build_model(name, in_channels=in_channels, out_channels=1, dim=dim, **SMALL[name])
    assert_rejects_mismatched_inputs(model.double().eval())
