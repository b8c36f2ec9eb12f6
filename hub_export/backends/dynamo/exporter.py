"""``DynamoExporter``: the ``torch.export`` ExportedProgram itself, saved as ``model.pt2`` (and compiled by
AOTInductor into ``model.aoti.pt2`` with ``DynamoConfig(compile="aoti")``)."""

from __future__ import annotations

import re
from typing import Any

from ...configs import ExportConfig
from ...export.exporter import HfExporter, Lowered
from ...export.trace import Traced
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
        """The traced program is the Dynamo program; ``compile="aoti"`` compiles it for the traced device and
        records the target in the component's ``extra``. A dim whose minimum the signature lowered below the
        trace's (``export_component(lower_mins=...)``) is admitted by the program too (:func:`_admit_lower_mins`)."""
        _admit_lower_mins(traced)
        if getattr(config, "compile", None) != "aoti":
            return traced.program
        weights = getattr(config, "compiled_weights", "packed")
        compiled = compile_aoti(traced.program, traced.device, weights=weights)
        return Lowered(
            compiled, extra={"compile": "aoti", "compiled_weights": weights, "target": dict(compiled.target)}
        )


#: A guard torch.export adds when it specializes a size away from 1 (``s != 1``, ``(s + t) != 1``, ``s > 1``).
_NOT_ONE = re.compile(r"(!= 1|> 1)$")


def _admit_lower_mins(traced: Traced) -> None:
    """Let the program take the sizes down to the signature's minimum where the signature's is below the trace's.

    ``torch.export`` traces a query axis sampled at two tokens assuming it is not 1 (its 0/1 specialization): it
    records the range ``[2, ...]`` and guards ``s != 1`` and ``s > 1``, which ``ExportedProgram.module()`` asserts
    on every call. The decode graph serving one-token steps (``generation/_one_graph.py``) is checked against eager
    at one token by its caller; here the range's minimum is lowered and the guards that only say "not 1" about
    that axis are dropped, so the program's module (and the saved ``.pt2``) accept it.
    """
    program = traced.program
    ranges = getattr(program, "range_constraints", None)
    guards = getattr(program, "_guards_code", None)
    if not isinstance(ranges, dict) or not isinstance(guards, list):
        return
    placeholders = {n.name: n for n in program.graph.nodes if n.op == "placeholder"}
    user_inputs = list(program.graph_signature.user_inputs)
    lowered: dict[Any, int] = {}
    sources: list[tuple[Any, str]] = []
    for index, spec in enumerate(traced.signature.inputs):
        if index >= len(user_inputs) or user_inputs[index] not in placeholders:
            return
        value = placeholders[user_inputs[index]].meta.get("val")
        for axis, name in enumerate(spec.shape):
            dim = traced.signature.dims.get(name) if isinstance(name, str) else None
            size = value.shape[axis] if value is not None and axis < value.dim() else None
            symbol = getattr(getattr(size, "node", None), "expr", None)
            if dim is None or symbol not in ranges:
                continue
            sources.append((symbol, f"L['tensors'][{index}].size()[{axis}]"))
            if ranges[symbol].lower > dim.min:
                lowered[symbol] = dim.min
    if not lowered:
        return
    for symbol, low in lowered.items():
        ranges[symbol] = type(ranges[symbol])(low, ranges[symbol].upper)
    names = [source for symbol, source in sources if symbol in lowered]
    program._guards_code = [g for g in guards if not (_NOT_ONE.search(g) and any(n in g for n in names))]
