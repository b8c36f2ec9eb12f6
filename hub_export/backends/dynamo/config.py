"""``DynamoConfig``: export with ``torch.export`` to a ``.pt2`` ExportedProgram."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ...configs import ExportConfig
from ...formats import ExportFormat, FileLayout

__all__ = ["FORMAT", "LAYOUT", "DynamoConfig"]

FORMAT = ExportFormat.declare("dynamo")
#: One ``<component>.pt2`` archive per component, in ``pt2/`` on the Hub.
LAYOUT = FileLayout(subfolder="pt2", files=((".pt2", "program"),))


@dataclass
class DynamoConfig(ExportConfig):
    """Export with ``torch.export`` to a ``.pt2`` ExportedProgram."""

    export_format: ClassVar[ExportFormat] = FORMAT
