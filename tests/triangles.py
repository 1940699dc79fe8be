"""Point location in a triangle mesh, for the brute-force references of the P1 tests."""

import numpy as np


def locate(pos, cells, points):
    """Barycentric coordinates ``[M, 3]`` and cell ``[M]`` of ``points`` in the triangles
    ``pos[cells]``, searched over all triangles (each point must lie in one, to 1e-9)."""
    corner = pos[cells]  # (T, 3, 2)
    a, b, c = corner[:, 0], corner[:, 1], corner[:, 2]
    det = (b[:, 0] - a[:, 0]) * (c[:, 1] - a[:, 1]) - (c[:, 0] - a[:, 0]) * (b[:, 1] - a[:, 1])
    d = points[:, None, :] - a[None]  # (M, T, 2)
    l1 = (d[..., 0] * (c[:, 1] - a[:, 1]) - d[..., 1] * (c[:, 0] - a[:, 0])) / det
    l2 = ((b[:, 0] - a[:, 0]) * d[..., 1] - (b[:, 1] - a[:, 1]) * d[..., 0]) / det
    lam = np.stack([1 - l1 - l2, l1, l2], -1)  # (M, T, 3)
    cell = np.argmax(lam.min(-1), 1)
    assert (lam[np.arange(len(points)), cell].min(-1) > -1e-9).all()
    return lam[np.arange(len(points)), cell], cell
