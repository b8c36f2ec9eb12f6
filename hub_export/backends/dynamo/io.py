"""Save and load ``.pt2`` programs: ``torch.export.save``, and a loader that reads the archive as checked data.

Loading never calls ``torch.export.load``: :func:`hub_export.backends.dynamo._pt2.read_pt2` checks the archive and
rebuilds the program from the checked entries only (see :mod:`.safety` for what is checked and why).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ...formats import SafetyOptions
from ...manifest import ComponentEntry
from ._pt2 import read_pt2
from .config import LAYOUT

__all__ = ["load_program", "save_program"]


def save_program(program: Any, directory: Path, component: str) -> list[str]:
    """``torch.export.save`` to ``<component>.pt2``."""
    import torch

    (name,) = LAYOUT.component_files(component)
    torch.export.save(program, str(Path(directory) / name))
    return [name]


def load_program(directory: Path, component: str, entry: ComponentEntry, options: SafetyOptions | None = None) -> Any:
    """The component's ``ExportedProgram``, rebuilt from its checked ``.pt2`` (the file found by its exact name).

    Raises:
        UnsafeExportError: The archive is not what ``torch.export.save`` writes, or would run code (see
            :mod:`.safety`).
    """
    paths = LAYOUT.paths(component, [f.path for f in entry.files])
    name = paths["program"]
    size = next(f.size for f in entry.files if f.path == name)
    contents = read_pt2(
        Path(directory) / name, name, options=options or SafetyOptions(), expected_size=size, build=True
    )
    return contents.program
