"""``DynamoExporter``: the ``torch.export`` ExportedProgram itself, saved as ``model.pt2``."""

from __future__ import annotations

from typing import Any

from ...configs import ExportConfig
from ...export.exporter import HfExporter
from ...export.trace import Traced
from .config import FORMAT, DynamoConfig

__all__ = ["DynamoExporter"]


class DynamoExporter(HfExporter):
    """Export to a ``torch.export`` ExportedProgram (``.pt2``), run by torch on any device."""

    export_format = FORMAT
    config_class = DynamoConfig
    parity_atol = 1e-4

    def export_program(self, traced: Traced, config: ExportConfig) -> Any:
        """The traced program is the Dynamo program."""
        return traced.program
