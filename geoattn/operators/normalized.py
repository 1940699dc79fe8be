"""A model together with the normalisers of its inputs and outputs: the object users predict with."""

from __future__ import annotations

import torch
from torch import nn

from ..mesh.mesh import Mesh
from ..mesh.validation import validate_weights
from ..mesh.weights import node_average_weights
from .normalizer import GaussianNormalizer
from .wrapper import MeshOperator, fit_model_mesh


class NormalizedOperator(MeshOperator):
    """Wraps a model so that it reads and returns physical values.

    .. math::
        \\mathcal{G}(u) = D_y\\big(\\mathcal{G}_\\theta(E_x(u))\\big),

    with :math:`E_x` the input normaliser's ``encode`` and :math:`D_y` the output normaliser's
    ``decode`` (both :class:`GaussianNormalizer`, identity until fitted).

    With ``unweighted=True`` the model sees the node-average weights
    :math:`w_i = |D| / N` (:func:`~geoattn.mesh.node_average_weights`) in place of the quadrature weights (the ablation that shows why the
    weights matter: on a graded mesh it over-weights the refined region).

    Every call first checks its inputs, in :math:`O(N)` on their device: the model's
    :meth:`~geoattn.models.NeuralOperator.check_inputs` (channels, dimension), then
    :func:`~geoattn.mesh.validate_weights` (one weight per node, finite, ``>= 0``, a positive total
    per graph, ``batch`` one graph index per node). A bad input raises its typed error instead of
    returning a finite but meaningless output (a NaN or negative weight does not always show in the
    output). The weights are checked once per :class:`~geoattn.mesh.Mesh` (kept in its memo), and
    not while :func:`torch.export.export` traces the operator (:func:`geoattn.export.export_operator`):
    a check that reads values cannot be part of a graph that runs on any mesh.

    The operator also keeps the coordinate frame its training meshes were read in (``origin``
    and ``scale`` of :func:`~geoattn.mesh.from_meshio`, recorded by :meth:`record_frame`, which
    :class:`~geoattn.train.Trainer` calls) and saves it in checkpoints: read every mesh it
    predicts on in that frame, ``read_mesh(path, **operator.frame)``, so that the model sees
    it where it saw the training meshes. Checkpoints from before frames load with none.

    The names of the fields it was trained on (:attr:`fields`, with :attr:`x_names`,
    :attr:`y_names` and :attr:`param_names`) and the training settings (:attr:`settings`) travel
    in its checkpoint too, so that a checkpoint copied alone says what it reads and predicts.

    Args:
        model: a :class:`~geoattn.models.NeuralOperator`.
        unweighted: feed the model node-average weights (default ``False``).

    ``forward(x, mesh, *, query=None)``: ``x [N, C_in]`` at the nodes of ``mesh`` (a
    :class:`~geoattn.mesh.Mesh`), the model's answer at the nodes of ``mesh`` (or of ``query``).
    The former call ``op(x, pos, weight, batch)`` still works (a new Mesh per call).

    Shapes:
        - as the wrapped model: ``x [N, C_in]`` in, ``[N_out, C_out]`` out.
    """

    def __init__(self, model: nn.Module, unweighted: bool = False):
        super().__init__()
        self.model = model
        self.unweighted = unweighted
        self.x_normalizer = GaussianNormalizer(model.in_channels)
        self.y_normalizer = GaussianNormalizer(model.out_channels)
        # the frame (origin..., scale) of the training meshes as float64 bit patterns in int64, so
        # that casting the operator (.float(), .half()) leaves it exact; empty: no frame
        self.register_buffer("frame_bits", torch.zeros(0, dtype=torch.int64))
        #: the names of the input fields, target fields and global parameters the model was trained
        #: on (``{"x": [...], "y": [...], "params": [...]}``; ``None`` when unnamed), saved in checkpoints
        self.fields: dict | None = None
        #: the training settings stored with the checkpoint it was loaded from (``{}`` when none)
        self.settings: dict = {}

    @property
    def frame(self) -> dict:
        """The keyword arguments ``origin`` and ``scale`` of :func:`~geoattn.mesh.from_meshio` /
        :func:`~geoattn.mesh.read_mesh` that put a mesh in the frame of the training meshes
        (``{}`` when they were read without one)."""
        if self.frame_bits.numel() == 0:
            return {}
        values = self.frame_bits.detach().cpu().view(torch.float64).tolist()
        return {"origin": values[:-1], "scale": values[-1]}

    @property
    def x_names(self) -> list[str] | None:
        """The input point fields the model reads, in channel order (``None``: unnamed)."""
        return None if self.fields is None else list(self.fields.get("x") or [])

    @property
    def y_names(self) -> list[str] | None:
        """The target fields the model predicts, one per output channel (``None``: unnamed)."""
        return None if self.fields is None else list(self.fields.get("y") or [])

    @property
    def param_names(self) -> list[str]:
        """The global parameters appended to the inputs as constant channels, in order."""
        return [] if self.fields is None else list(self.fields.get("params") or [])

    def record_frame(self, frame: tuple | None) -> None:
        """Keep ``frame`` (a sample's ``frame`` attribute: ``(origin, scale)``, or ``None``) as
        the frame of the training meshes."""
        values = [] if frame is None else [*map(float, frame[0]), float(frame[1])]
        bits = torch.tensor(values, dtype=torch.float64).view(torch.int64)
        self.frame_bits = bits.to(self.frame_bits.device)

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        key = prefix + "frame_bits"
        if key not in state_dict:  # a checkpoint from before frames were recorded: no frame
            state_dict[key] = torch.zeros(0, dtype=torch.int64)
        self.frame_bits = torch.zeros_like(state_dict[key], device=self.frame_bits.device)  # its length
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    def fit_mesh(self, mesh: Mesh) -> None:
        """Fit the model's mesh-dependent state on the training mesh (see
        :meth:`~geoattn.models.NeuralOperator.fit_mesh`)."""
        fit_model_mesh(self.model, mesh)

    def forward(self, x: torch.Tensor, mesh: Mesh, *, query: Mesh | None = None) -> torch.Tensor:
        self.model.check_inputs(x, mesh.pos)
        if torch.compiler.is_exporting():  # traced once: the values are checked by the caller, not in the graph
            mesh.weights_checked = True
        if not mesh.weights_checked:
            validate_weights(mesh.weight, mesh.num_nodes, batch=mesh.batch_vector)
            mesh.weights_checked = True
        if x.shape[0] != mesh.num_nodes:
            validate_weights(mesh.weight, x.shape[0], batch=mesh.batch_vector)  # names the mismatch
        if self.unweighted:
            mesh = node_averaged(mesh)
        x = self.x_normalizer.encode(x)
        return self.y_normalizer.decode(self.model(x, mesh) if query is None else self.model(x, mesh, query=query))


def node_averaged(mesh: Mesh) -> Mesh:
    """``mesh`` with the node-average weights :math:`w_i = |D| / N` of every graph
    (:func:`~geoattn.mesh.node_average_weights`), kept in its memo."""
    def build() -> Mesh:
        members = None if mesh.members is None else [node_averaged(m) for m in mesh.members]
        return Mesh(mesh.pos, node_average_weights(mesh.weight, mesh.batch_vector), mesh.cells,
                    batch=mesh.batch_vector, layout=mesh.layout, members=members)

    return mesh.structure(("node_averaged",), lambda _: build())


__all__ = ["NormalizedOperator", "node_averaged"]
