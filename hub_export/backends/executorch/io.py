"""Save and load ExecuTorch programs: ``<component>.pte``, and ``<component>.ptd`` when the weights are kept outside.

A program in hub_export is an ``executorch.runtime.Program`` loaded from files: the exporter writes the lowered
program to a temporary folder as soon as it is lowered (so the lowering's copy of the weights is freed before the
program runs), and a loaded export reads its verified folder. The files a program came from are remembered
(:func:`program_files`): saving copies them, hashing on the way. The runtime maps the files rather than reading
them into memory.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..._files import copy_file
from ...errors import ExportError, UnsafeExportError
from ...formats import SafetyOptions
from ...manifest import ComponentEntry
from ._log_sink import runtime_logs_bypass_python
from ._pages import pages_not_locked
from ._plan import check_plan_indices
from ._xnnpack import check_xnnpack_delegates, ptd_named_sizes
from .config import LAYOUT, SHARED_WEIGHTS
from .safety import check_ptd_header, check_pte_header

__all__ = [
    "ProgramFiles",
    "load_program",
    "load_runtime_program",
    "program_contents",
    "program_files",
    "save_program",
    "save_programs",
]


@dataclass(frozen=True)
class ProgramFiles:
    """The files an ExecuTorch runtime program was loaded from.

    Attributes:
        pte: The program file.
        ptd: Its external data file, or None.
        keepalive: What keeps a temporary folder alive as long as the program (or None).
    """

    pte: Path
    ptd: Path | None = None
    keepalive: Any = None


# runtime Program -> the files it was loaded from (the runtime Program cannot serialize itself back)
_FILES: weakref.WeakKeyDictionary[Any, ProgramFiles] = weakref.WeakKeyDictionary()


def program_files(program: Any) -> ProgramFiles | None:
    """The files ``program`` was loaded from, when hub_export loaded it."""
    try:
        return _FILES.get(program)
    except TypeError:  # not weak-referenceable: not ours
        return None


def _read_exactly(handle: Any, end: int, label: str) -> bytes:
    """The first ``end`` bytes of the open file (the program's flatbuffer)."""
    handle.seek(0)
    data = handle.read(end)
    if len(data) != end:
        raise UnsafeExportError(f"{label}: the file ends inside its program ({len(data)} of {end} bytes).")
    return data


def load_runtime_program(files: ProgramFiles, label: str, size: int | None = None) -> Any:
    """``Runtime.load_program`` of these files with full flatbuffer verification, remembered for saving.

    The ``.pte``'s headers (:func:`.safety.check_pte_header`), its plans' indices
    (:func:`._plan.check_plan_indices`) and its XNNPACK delegates' graphs (:func:`._xnnpack.check_xnnpack_delegates`,
    against the named data of the program and of its ``.ptd``) are checked on the program's flatbuffer and the
    graphs, read bounded (they are small: the weights are in the segments after them); the runtime then maps the
    file itself, so the weights are never held as a Python copy (``size``: the size export.json lists, which the
    file must have).

    Raises:
        UnsafeExportError: Bad headers, or the runtime's verification refused the program.
    """
    from executorch.runtime import Runtime, Verification

    actual = files.pte.stat().st_size
    if size is not None and actual != size:
        raise UnsafeExportError(f"{label}: {actual} bytes, but export.json lists {size}.")
    named: dict[bytes, int] = {}
    if files.ptd is not None:
        with open(files.ptd, "rb") as handle:
            ptd_size = files.ptd.stat().st_size
            check_ptd_header(handle.read(64), ptd_size, files.ptd.name)
            named = ptd_named_sizes(handle, ptd_size, files.ptd.name)
    with open(files.pte, "rb") as handle:
        end = check_pte_header(handle.read(64), actual, label)
        flatbuffer = _read_exactly(handle, end, label)
        check_plan_indices(flatbuffer, label)
        check_xnnpack_delegates(flatbuffer, handle, actual, label, named)
    try:  # full flatbuffer verification: the file may come from an untrusted repo
        with runtime_logs_bypass_python(), pages_not_locked():
            program = Runtime.get().load_program(
                files.pte,
                verification=Verification.InternalConsistency,
                data_path=str(files.ptd) if files.ptd is not None else None,
            )
    except Exception as exc:  # noqa: BLE001 - the binding raises RuntimeError, ValueError...: all refusals
        raise UnsafeExportError(f"{label}: the ExecuTorch runtime refused the program ({exc}).") from None
    _FILES[program] = files
    return program


def save_program(program: Any, directory: Path, component: str) -> list[str]:
    """Write ``<component>.pte`` (and ``<component>.ptd``): copies of the files the program was loaded from, or an
    ``ExecutorchProgramManager`` streamed out.

    Raises:
        ExportError: A runtime program hub_export did not load (its files are unknown), or a manager keeping its
            weights under several data files.
    """
    names = LAYOUT.component_files(component)
    pte, ptd = list(names)
    directory = Path(directory)
    if hasattr(program, "write_to_file"):  # an ExecutorchProgramManager
        with open(directory / pte, "wb") as handle:
            program.write_to_file(handle)
        data = getattr(program, "_tensor_data", None) or {}
        if len(data) > 1:
            raise ExportError(f"This ExecuTorch program keeps weights in {len(data)} data files; hub_export saves one.")
        for tag in data:
            program.write_tensor_data_to_file(str(directory))
            (directory / f"{tag}.ptd").rename(directory / ptd)
        return [pte, *([ptd] if data else [])]
    files = program_files(program)
    if files is None:
        raise ExportError(
            f"Cannot save a {type(program).__name__}: only ExecuTorch programs exported or loaded by hub_export "
            "keep their files."
        )
    copy_file(files.pte, directory / pte)
    if files.ptd is None:
        return [pte]
    copy_file(files.ptd, directory / ptd)
    return [pte, ptd]


def save_programs(programs: dict[str, Any], directory: Path) -> dict[str, list[str]]:
    """Save each component (:func:`save_program`), keeping one ``shared.ptd`` where one component's weights file
    holds every other's (a generation export's ``prefill`` and ``decode``: see ``_shared.py``), decided on the files
    the programs were loaded from before anything is written; returns each component's files, its ``.pte`` first."""
    from ._shared import share_weights, shared_host

    directory = Path(directory)
    sources = {name: program_files(program) for name, program in programs.items()}
    known = {name: files for name, files in sources.items() if files is not None}
    if len(known) < len(programs) or len(programs) < 2:  # a manager's files exist once written
        written = {name: save_program(program, directory, name) for name, program in programs.items()}
        return share_weights(directory, written) if len(written) > 1 else written
    ptds = {name: files.ptd for name, files in known.items() if files.ptd is not None}
    host = shared_host(ptds)
    if host is None:
        return {name: save_program(program, directory, name) for name, program in programs.items()}
    written = {}
    for name, files in known.items():
        pte = next(iter(LAYOUT.component_files(name)))
        copy_file(files.pte, directory / pte)
        written[name] = [pte, SHARED_WEIGHTS] if name in ptds else [pte]
    copy_file(ptds[host], directory / SHARED_WEIGHTS)
    return written


def load_program(directory: Path, component: str, entry: ComponentEntry, options: SafetyOptions | None = None) -> Any:
    """The ``.pte`` (with its ``.ptd`` when listed) as an ``executorch.runtime.Program``, checked as
    :func:`load_runtime_program` says whatever the caller checked before."""
    paths = LAYOUT.paths(component, [f.path for f in entry.files])
    directory = Path(directory)
    ptd = directory / paths["weights"] if "weights" in paths else None
    size = next(f.size for f in entry.files if f.path == paths["program"])
    return load_runtime_program(ProgramFiles(directory / paths["program"], ptd), paths["program"], size)


def program_contents(program: Any) -> tuple[list[str], list[str]]:
    """What a program's methods run: the operators left to the portable kernels, and the delegates' backend ids
    (the lowered graph itself is not kept; this reads the ``.pte``)."""
    from executorch.exir._serialize._program import deserialize_pte_binary

    files = program_files(program)
    if files is None:
        raise ExportError(f"{type(program).__name__} was not exported or loaded by hub_export: its file is unknown.")
    pte = deserialize_pte_binary(files.pte.read_bytes()).program
    operators = [op.name for plan in pte.execution_plan for op in plan.operators]
    delegates = [delegate.id for plan in pte.execution_plan for delegate in plan.delegates]
    return operators, delegates
