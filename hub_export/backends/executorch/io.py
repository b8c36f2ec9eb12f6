"""Save and load ExecuTorch programs: one ``<component>.pte`` flatbuffer per component.

A loaded program is an ``executorch.runtime.Program``; the export-time ``ExecutorchProgramManager`` cannot be rebuilt
from the file, so the bytes of loaded programs are kept (:func:`pte_bytes`) to save them again.
"""

from __future__ import annotations

import weakref
from pathlib import Path
from typing import Any

from ..._bounded import read_bounded
from ...errors import ExportError, UnsafeExportError
from ...formats import SafetyOptions
from ...manifest import ComponentEntry
from ._log_sink import runtime_logs_bypass_python
from ._plan import check_plan_indices
from .config import LAYOUT
from .safety import check_pte_header

__all__ = ["load_program", "pte_bytes", "save_program"]

# .pte bytes of programs loaded from disk: the runtime Program cannot serialize itself back.
_LOADED_BYTES: weakref.WeakKeyDictionary[Any, bytes] = weakref.WeakKeyDictionary()


def save_program(program: Any, directory: Path, component: str) -> list[str]:
    """Write ``<component>.pte``: streamed from an ``ExecutorchProgramManager``, or a loaded program's bytes.

    Raises:
        ExportError: The program keeps tensor data outside the ``.pte`` (a ``.ptd`` file), or cannot be saved.
    """
    (name,) = LAYOUT.component_files(component)
    path = Path(directory) / name
    if hasattr(program, "write_to_file"):
        if getattr(program, "_tensor_data", None):
            raise ExportError("This ExecuTorch program keeps weights in .ptd files, which hub_export cannot save.")
        with open(path, "wb") as handle:
            program.write_to_file(handle)
    else:
        path.write_bytes(pte_bytes(program))
    return [name]


def load_program(directory: Path, component: str, entry: ComponentEntry, options: SafetyOptions | None = None) -> Any:
    """The ``.pte`` as an ``executorch.runtime.Program`` (the export-time manager cannot be rebuilt from it).

    The program file is found by its exact name, its size is the one export.json lists, and its headers
    (:func:`.safety.check_pte_header`) and its plans' indices (:func:`._plan.check_plan_indices`) are checked before
    the runtime parses a byte of it, whatever the caller checked before.

    Raises:
        UnsafeExportError: Bad headers, or the runtime's verification refused the program.
    """
    from executorch.runtime import Runtime, Verification

    name = LAYOUT.paths(component, [f.path for f in entry.files])["program"]
    size = next(f.size for f in entry.files if f.path == name)
    data = read_bounded(Path(directory) / name, size, name)
    end = check_pte_header(data[:64], len(data), name)
    check_plan_indices(data[:end], name)
    try:  # full flatbuffer verification: the file may come from an untrusted repo
        with runtime_logs_bypass_python():
            program = Runtime.get().load_program(data, verification=Verification.InternalConsistency)
    except Exception as exc:  # noqa: BLE001 - the binding raises RuntimeError, ValueError...: all refusals
        raise UnsafeExportError(f"{name}: the ExecuTorch runtime refused the program ({exc}).") from None
    _LOADED_BYTES[program] = data
    return program


def pte_bytes(program: Any) -> bytes:
    """The serialized ``.pte`` of an ``ExecutorchProgramManager`` or of a program loaded by hub_export.

    Raises:
        ExportError: ``program`` is a runtime Program that hub_export did not load (its bytes are unknown).
    """
    if hasattr(program, "buffer") and hasattr(program, "write_to_file"):
        return program.buffer
    data = _LOADED_BYTES.get(program)
    if data is None:
        raise ExportError(
            f"Cannot serialize a {type(program).__name__}: only programs exported or loaded by hub_export keep "
            "their .pte bytes."
        )
    return data
