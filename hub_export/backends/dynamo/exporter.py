"""``DynamoExporter``: the ``torch.export`` ExportedProgram itself, saved as ``model.pt2`` (and compiled by
AOTInductor into ``model.aoti.pt2`` with ``DynamoConfig(compile="aoti")``)."""

from __future__ import annotations

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

    def export_program(self, traced: Traced, config: ExportConfig) -> Any:
        """The traced program is the Dynamo program; ``compile="aoti"`` compiles it for the traced device and
        records the target in the component's ``extra``."""
        if getattr(config, "compile", None) != "aoti":
            return traced.program
        compiled = compile_aoti(traced.program, traced.device)
        return Lowered(compiled, extra={"compile": "aoti", "target": dict(compiled.target)})
