"""``DynamoExporter``: the ``torch.export`` ExportedProgram itself, saved as ``model.pt2``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..configs import DynamoConfig, ExportConfig
from ..formats import ExportFormat, layout_for
from ..manifest import ComponentEntry
from ._trace import Traced
from .base import HfExporter

__all__ = ["DynamoExporter"]


class DynamoExporter(HfExporter):
    """Export to a ``torch.export`` ExportedProgram (``.pt2``), run by torch on any device."""

    export_format = ExportFormat.DYNAMO
    config_class = DynamoConfig
    parity_atol = 1e-4

    def export_program(self, traced: Traced, config: ExportConfig) -> Any:
        """The traced program is the Dynamo program."""
        return traced.program

    @classmethod
    def save_program(cls, program: Any, directory: Path, component: str) -> list[str]:
        """``torch.export.save`` to ``<component>.pt2``."""
        import torch

        (name,) = layout_for(cls.export_format).files(component)
        torch.export.save(program, str(Path(directory) / name))
        return [name]

    @classmethod
    def load_program(cls, directory: Path, component: str, entry: ComponentEntry) -> Any:
        """``torch.export.load`` the component's ``.pt2``."""
        import torch

        return torch.export.load(str(Path(directory) / entry.files[0].path))

    @classmethod
    def runner_class(cls) -> type:
        """:class:`~hub_export.runners.dynamo.DynamoRunner`."""
        from ..runners.dynamo import DynamoRunner

        return DynamoRunner
