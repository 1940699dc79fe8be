"""Export a trained operator for one mesh of any size: :func:`torch.export.export` and ONNX.

The operator a user loads (:func:`~geoattn.train.load_operator`: model, normalisers, coordinate
frame) is wrapped in :class:`SingleMesh`, a module called with plain tensors for one graph,
``(x [N, C_in], pos [N, d], weight [N]) -> [N, C_out]``, whose node count ``N`` is a dynamic
dimension: the exported program, and the ONNX model, run on meshes of any size. The coordinates and
weights are those of the mesh file (the frame the model was trained in is applied inside), and the
global parameters, when the model has any, are the last input channels, as in training.

Only models whose forward is tensor operations throughout can be exported: ``tno``,
``galerkin``, ``slice`` and ``mesh_fno``. Models that build structure from the mesh on the host
(a radius graph, a partition into patches, a multigrid hierarchy), and operators that refine or
interpolate the mesh first, raise :class:`ExportError` naming the reason.
"""

from __future__ import annotations

import logging
from pathlib import Path

import torch
from torch import nn

from .errors import GeoattnError
from .mesh.mesh import Layout, Mesh

log = logging.getLogger(__name__)

#: why a model cannot be exported: its forward builds host structure from the mesh on each new mesh
NOT_EXPORTABLE = {
    "gno": "it builds its radius graph on the host (scipy) for each mesh",
    "multigrid": "it builds its mesh hierarchy on the host for each mesh",
    "vit": "it partitions each mesh into patches on the host",
    "fano": "it partitions each mesh into patches on the host",
}


class ExportError(GeoattnError, RuntimeError):
    """An operator cannot be exported for meshes of any size (the message says why)."""


class SingleMesh(nn.Module):
    """``operator`` as a module of plain tensors for one mesh: ``forward(x, pos, weight)``.

    ``pos [N, d]`` and ``weight [N]`` are the nodes and quadrature weights in the mesh file's
    coordinates; the operator's frame (``origin`` and ``scale`` of
    :func:`~geoattn.mesh.from_meshio`) is applied here, as :func:`~geoattn.eval.predict_meshio`
    applies it when it reads a file. The inputs are trusted: nothing is validated in the graph
    (validate a mesh with :func:`~geoattn.mesh.from_meshio` before calling an exported model).

    Shapes:
        ``x [N, C_in]``, ``pos [N, d]``, ``weight [N]`` in; ``[N, C_out]`` out.
    """

    def __init__(self, operator: nn.Module):
        super().__init__()
        self.operator = operator
        frame = getattr(operator, "frame", {}) or {}
        origin = frame.get("origin")
        self.register_buffer("origin", torch.tensor(origin if origin is not None else [], dtype=torch.float64))
        self.scale = float(frame.get("scale") or 1.0)

    def forward(self, x: torch.Tensor, pos: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        if self.origin.numel():
            pos = pos - self.origin.to(pos.dtype)
        if self.scale != 1.0:
            pos = pos / self.scale
            weight = weight / self.scale ** pos.shape[1]
        mesh = Mesh(pos, weight, layout=Layout((pos.shape[0],)), check=False)  # one graph; N symbolic
        mesh.checked = mesh.weights_checked = True  # trusted (see above)
        return self.operator(x, mesh)


def _check_exportable(operator: nn.Module) -> None:
    model = getattr(operator, "model", operator)
    name = getattr(model, "model_name", None)
    if name is None:
        raise ExportError(f"cannot export {type(model).__name__} inside {type(operator).__name__}: only a "
                          "registered model, as load_operator returns it, is exported (not a refined, latent-mesh "
                          "or ensemble operator, whose meshes are built on the host)")
    if name in NOT_EXPORTABLE:
        raise ExportError(f"model {name!r} cannot be exported for meshes of any size: {NOT_EXPORTABLE[name]}; "
                          "tno, galerkin, slice and mesh_fno can")


def export_operator(operator: nn.Module, mesh: Mesh, path: str | Path | None = None, *,
                    x: torch.Tensor | None = None) -> torch.export.ExportedProgram:
    """Export ``operator`` (as :func:`~geoattn.train.load_operator` returns it) with a dynamic
    node count, and write it to ``path`` when given: ONNX for ``.onnx`` (the node count a
    symbolic dimension ``N``; the field names in the model's metadata), else
    :func:`torch.export.save` (``.pt2``).

    Args:
        operator: a :class:`~geoattn.operators.NormalizedOperator` of an exportable model.
        mesh: an example mesh of one graph (its size is not baked in; at least 4 nodes).
        path: file to write (optional).
        x: an example input ``[N, C_in]`` (default: zeros).

    Returns:
        the :class:`torch.export.ExportedProgram` of :class:`SingleMesh` ``(x, pos, weight)``.

    Raises:
        ExportError: the model builds host structure per mesh, or the export fails, or the
            written ONNX model has a fixed node count (one line naming the cause).
    """
    _check_exportable(operator)
    if mesh.num_graphs != 1:
        raise ExportError(f"export on an example mesh of one graph, got a batch of {mesh.num_graphs}")
    module = SingleMesh(operator).eval()
    channels = operator.model.in_channels
    if x is None:
        x = torch.zeros(mesh.num_nodes, channels, dtype=mesh.pos.dtype, device=mesh.pos.device)
    args = (x, mesh.pos, mesh.weight)
    n = torch.export.Dim("N", min=4)
    shapes = ({0: n}, {0: n}, {0: n})
    einsum = torch.backends.opt_einsum.enabled
    torch.backends.opt_einsum.enabled = False  # its contraction order would specialise N
    try:
        with torch.no_grad():
            program = torch.export.export(module, args, dynamic_shapes=shapes, strict=False)
            if path is not None and str(path).endswith(".onnx"):
                _write_onnx(module, args, shapes, Path(path), operator)
            elif path is not None:
                torch.export.save(program, str(path))
    except ExportError:
        raise
    except Exception as err:  # torch raises many types; answered with one line naming the model
        name = getattr(operator.model, "model_name", type(operator.model).__name__)
        to = " to ONNX" if path is not None and str(path).endswith(".onnx") else ""
        raise ExportError(f"model {name!r} does not export{to}: {_reason(err)}") from err
    finally:
        torch.backends.opt_einsum.enabled = einsum
    return program


def _reason(err: BaseException) -> str:
    """The line of an exporter's long message that names the cause."""
    text = str(err)
    for line in text.splitlines():
        if "No ONNX function found" in line:
            line = line.split(">: ", 1)[-1].strip()
            if "complex" in line:
                line += " (ONNX has no complex tensors; export to .pt2 with torch.export instead)"
            return line
    first = text.strip().splitlines()[0] if text.strip() else ""
    return f"{type(err).__name__}: {first}"


def _write_onnx(module: nn.Module, args: tuple, shapes: tuple, path: Path, operator: nn.Module) -> None:
    from .optional import require

    require("onnx", "export", "ONNX export")
    require("onnxscript", "export", "ONNX export")
    import onnx

    onnx_program = torch.onnx.export(module, args, dynamo=True, dynamic_shapes=shapes,
                                     input_names=["x", "pos", "weight"], output_names=["y"], verbose=False)
    model = onnx_program.model_proto
    fixed = [i.name for i in model.graph.input
             if i.type.tensor_type.shape.dim and not i.type.tensor_type.shape.dim[0].dim_param]
    if fixed:
        raise ExportError(f"the ONNX exporter fixed the node count of inputs {fixed}; this model cannot be "
                          "exported to ONNX for meshes of any size")
    fields = getattr(operator, "fields", None) or {}
    meta = {"geoattn.model": operator.model.model_name, **{f"geoattn.{k}": ",".join(v) for k, v in fields.items()},
            "geoattn.frame": repr(getattr(operator, "frame", {}))}
    for key, value in meta.items():
        model.metadata_props.add(key=key, value=value)
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path))


__all__ = ["ExportError", "NOT_EXPORTABLE", "SingleMesh", "export_operator"]
