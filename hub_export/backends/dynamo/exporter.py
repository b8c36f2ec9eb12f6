"""``DynamoExporter``: the ``torch.export`` ExportedProgram itself, saved as ``model.pt2`` (and compiled by
AOTInductor into ``model.aoti.pt2`` with ``DynamoConfig(compile="aoti")``)."""

from __future__ import annotations

from typing import Any

from ...configs import ExportConfig
from ...export.exporter import HfExporter, Lowered
from ...export.trace import Traced
from ...export.widen import admit_down_to
from ._call import use_model_call
from .compiled import compile_aoti
from .config import FORMAT, DynamoConfig

__all__ = ["DynamoExporter"]


class DynamoExporter(HfExporter):
    """Export to a ``torch.export`` ExportedProgram (``.pt2``), run by torch on any device."""

    export_format = FORMAT
    config_class = DynamoConfig
    parity_atol = 1e-4
    one_generation_graph = True  # one program (one module) holds the weights once (see HfExporter)

    def one_graph_refusal(self, config: ExportConfig) -> str | None:
        """Why a generation export with ``config`` keeps a prefill program (``generation/_one_graph.py``): one
        graph is not tried for an AOTInductor-compiled export (a failed check would cost a second compilation)."""
        if getattr(config, "compile", None) == "aoti":
            return "compile='aoti' compiles a prefill and a decode package (one graph is not tried)"
        return None

    def export_program(self, traced: Traced, config: ExportConfig) -> Any:
        """The traced program is the Dynamo program, called as the model is (keyword arguments in, the output's
        fields out: :func:`._call.use_model_call`, so that ``torch.export.load(path).module()(**inputs)`` runs it);
        ``compile="aoti"`` compiles it for the traced device (a package of the flat calling convention) and
        records the target in the component's ``extra``. A dim whose minimum the signature lowered below the
        trace's (``export_component(lower_mins=...)``) is admitted by the program too (:func:`_admit_lower_mins`)."""
        _admit_lower_mins(traced)
        if getattr(config, "compile", None) != "aoti":
            use_model_call(traced.program, traced.signature)
            return traced.program
        weights = getattr(config, "compiled_weights", "packed")
        compiled = compile_aoti(traced.program, traced.device, weights=weights)
        use_model_call(traced.program, traced.signature)  # the program saved beside the package
        return Lowered(
            compiled, extra={"compile": "aoti", "compiled_weights": weights, "target": dict(compiled.target)}
        )


def _admit_lower_mins(traced: Traced) -> None:
    """Let the program take the sizes down to the signature's minimum where the signature's is below the trace's.

    ``torch.export`` traces a query axis sampled at two tokens assuming it is not 1 (its 0/1 specialization): it
    records the range ``[2, ...]`` and guards ``s != 1`` and ``s > 1``, which ``ExportedProgram.module()`` asserts
    on every call. The decode graph serving one-token steps (``generation/_one_graph.py``) is checked against eager
    at one token by its caller; here the range's minimum is lowered and the guards that only say "not 1" about
    that axis are dropped (:func:`~hub_export.export.widen.admit_down_to`), so the program's module (and the saved
    ``.pt2``) accept it.
    """
    signature = traced.signature
    admit_down_to(traced.program, dict(signature.dims), [spec.shape for spec in signature.inputs])
