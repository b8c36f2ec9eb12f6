"""Save and load ``.pt2`` programs (``torch.export.save`` / ``torch.export.load``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ...manifest import ComponentEntry
from .config import LAYOUT

__all__ = ["load_program", "save_program"]


def save_program(program: Any, directory: Path, component: str) -> list[str]:
    """``torch.export.save`` to ``<component>.pt2``."""
    import torch

    (name,) = LAYOUT.component_files(component)
    torch.export.save(program, str(Path(directory) / name))
    return [name]


def load_program(directory: Path, component: str, entry: ComponentEntry) -> Any:
    """``torch.export.load`` the component's ``.pt2`` (checked by :mod:`.safety` first)."""
    import torch

    program = LAYOUT.paths(component, [f.path for f in entry.files])["program"]
    return torch.export.load(str(Path(directory) / program))
