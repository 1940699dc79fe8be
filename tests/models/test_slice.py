"""The slice transformer: mesh-refinement convergence, batching, and a trained model transferring."""

import pytest
import torch
from smooth_inputs import smooth_input

from geoattn import testing
from geoattn.mesh import families
from geoattn.models import SliceTransformer


def _model():
    torch.manual_seed(0)
    return SliceTransformer(2, 1, width=16, depth=2, num_heads=2, num_slices=8).double().eval()


def test_untrained_model_converges_under_refinement_of_graded_mesh():
    testing.assert_model_converges(_model(), smooth_input, families.unit_square(4, "graded"))


def test_batched_equals_separate_and_hparams_rebuild(two_meshes):
    testing.assert_batched_equals_separate(_model(), two_meshes)


@pytest.mark.slow
def test_trained_model_keeps_its_error_on_refined_and_graded_meshes(darcy_transfer):
    """Regression: trained briefly on one irregular mesh, the model's error on a refined and on a
    graded mesh of the same continuum samples stays within 25 % of its training-mesh error."""
    torch.manual_seed(0)
    report = darcy_transfer(SliceTransformer(1, 1, width=24, depth=2, num_heads=2, num_slices=16))
    assert report.mean("model", "train") < 0.15, report.table()
    for mesh in ("refined", "graded"):
        assert report.ratio("model", mesh) < 1.25, report.table()
