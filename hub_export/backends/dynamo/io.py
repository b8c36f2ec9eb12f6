"""Save and load ``.pt2`` programs (``torch.export.save`` / ``torch.export.load``) and AOTInductor packages."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from ...errors import UnsafeExportError
from ...formats import SafetyOptions
from ...manifest import ComponentEntry
from .compiled import CompiledProgram
from .config import LAYOUT

__all__ = ["load_program", "save_program"]


def _names(component: str) -> tuple[str, str]:
    """``(<component>.pt2, <component>.aoti.pt2)``."""
    names = list(LAYOUT.component_files(component))
    return names[0], names[1]


def save_program(program: Any, directory: Path, component: str) -> list[str]:
    """``torch.export.save`` to ``<component>.pt2``; a compiled program also copies its package to
    ``<component>.aoti.pt2``."""
    import torch

    name, native = _names(component)
    if not isinstance(program, CompiledProgram):
        torch.export.save(program, str(Path(directory) / name))
        return [name]
    if program.exported is not None:
        torch.export.save(program.exported, str(Path(directory) / name))
    elif program.program_path is not None:
        shutil.copyfile(program.program_path, Path(directory) / name)
    shutil.copyfile(program.package, Path(directory) / native)
    return [name, native]


def load_program(directory: Path, component: str, entry: ComponentEntry) -> Any:
    """``torch.export.load`` the component's ``.pt2`` (checked by :mod:`.safety` first). A compiled component is
    returned as a :class:`CompiledProgram` naming its package: the runner loads the package after checking the target,
    and the ExportedProgram is not read."""
    import torch

    paths = LAYOUT.paths(component, [f.path for f in entry.files])
    if "native" in paths:
        return CompiledProgram(
            package=Path(directory) / paths["native"],
            target=dict(entry.extra.get("target") or {}),
            program_path=Path(directory) / paths["program"],
        )
    return torch.export.load(str(Path(directory) / paths["program"]))


def read_program(path: Path, label: str, options: SafetyOptions, expected_size: int | None = None) -> Any:
    """A ``.pt2`` archive's ``ExportedProgram``, checked by :mod:`.safety` before torch reads it."""
    import torch

    from .safety import check_archive

    if expected_size is not None and path.stat().st_size != expected_size:
        raise UnsafeExportError(f"{label}: {path.stat().st_size} bytes, but {expected_size} are listed.")
    if not options.trust_pickles:
        check_archive(path, label)
    return torch.export.load(str(path))
