"""Memory of one training step on a tetrahedral mesh: every model stays far from quadratic.

Each model runs in a fresh process (``benchmarks/memory_3d.py --child``: the model as ``geoattn
train`` builds it for 3-D fields, one training step on a batch of two samples on the tetrahedral
unit cube of 12 cells per side, 2 197 nodes). The bound is on what the step adds to the resident
memory the process held before it (interpreter, torch, mesh, model), so that it does not depend on
how much torch itself takes on a machine. Each bound is about twice the step's measured peak and
at least 300 MiB above it; the results page ``docs/results/memory_3d.md`` has the measurements at
2 197 and 10 648 nodes.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from geoattn.mesh import radius_graph
from geoattn.nn.graph_kernel import GraphKernelIntegral

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "memory_3d.py"

#: MiB a training step on the 2 197-node cube may add to the resident memory before it. A
#: quadratic regression (one dense [N, N] float32 matrix per sample and head, saved for the
#: backward pass) would add hundreds of MiB to several GiB more at this size.
STEP_MIB = {
    "fano": 1400,
    "galerkin": 400,
    "gno": 600,  # with the kernel matrices of all edges kept for the backward pass: over 2 000
    "mesh_fno": 450,
    "multigrid": 500,
    "slice": 400,
    "tno": 400,
    "vit": 1200,
}


def step_memory(name: str) -> dict:
    proc = subprocess.run([sys.executable, str(SCRIPT), "--child", name, "12", "--steps", "1",
                           "--threads", "1", "--cap", "6"],
                          capture_output=True, text=True, timeout=240, env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(STEP_MIB))
def test_training_step_memory_on_a_tetrahedral_cube(name):
    result = step_memory(name)
    assert "error" not in result, result["error"]
    assert result["nodes"] == 13 ** 3
    added = result["peak_mib"] - result["before_mib"]
    assert added < STEP_MIB[name], f"{name}: the step added {added:.0f} MiB (bound {STEP_MIB[name]} MiB)"


def _saved_bytes(fn) -> tuple[torch.Tensor, int]:
    """``fn()`` and the bytes of the distinct storages autograd saved for its backward pass."""
    storages = {}

    def pack(t):
        s = t.untyped_storage()
        storages[s.data_ptr()] = s.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = fn()
    return out, sum(storages.values())


def test_graph_kernel_keeps_no_kernel_matrix_per_edge():
    """A ball that holds a fixed share of the nodes has ``E`` quadratic in ``N``: the layer must
    not keep the kernel matrices ``[E, C_out, C_in]`` (nor the messages) for its backward pass,
    and its chunks must add up to the one-piece sum, values and gradients."""
    torch.manual_seed(0)
    n, c = 1500, 8
    pos = torch.rand(n, 3, dtype=torch.float64)
    x = torch.randn(n, c, dtype=torch.float64, requires_grad=True)
    w = torch.full((n,), 1.0 / n, dtype=torch.float64)
    f = torch.randn(n, 1, dtype=torch.float64)
    edges = radius_graph(pos, 0.3)
    e = edges.shape[1]
    assert e > 65536  # more than one chunk at the default size
    layer = GraphKernelIntegral(c, c, dim=3, feature_channels=1, hidden_channels=16).double()
    out, saved = _saved_bytes(lambda: layer(x, pos, w, edge_index=edges, f=f))
    # kernel matrices of all edges: e * c * c * 8 bytes (about 60 MB here); the inputs, the
    # graph and the output are a few MB
    assert saved < e * c * c * 8 / 8, (saved, e)
    grads = torch.autograd.grad(out.square().sum(), [x, *layer.parameters()])
    whole = GraphKernelIntegral(c, c, dim=3, feature_channels=1, hidden_channels=16, edge_chunk=10**9).double()
    whole.load_state_dict(layer.state_dict())
    out_whole = whole(x, pos, w, edge_index=edges, f=f)
    grads_whole = torch.autograd.grad(out_whole.square().sum(), [x, *whole.parameters()])
    assert torch.allclose(out, out_whole, rtol=1e-12, atol=1e-12)
    for g, g_whole in zip(grads, grads_whole):
        assert torch.allclose(g, g_whole, rtol=1e-10, atol=1e-12)
