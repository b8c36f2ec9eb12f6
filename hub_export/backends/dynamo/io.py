"""Save and load ``.pt2`` programs: :func:`._writer.write_pt2` (``torch.export.save``'s layout), and a loader that reads the archive as checked data.

Loading never calls ``torch.export.load``: :func:`hub_export.backends.dynamo._pt2.read_pt2` checks the archive and
rebuilds the program from the checked entries only (see :mod:`.safety` for what is checked and why). A compiled
component's AOTInductor package (``<component>.aoti.pt2``, role ``native``) is not read here: it is returned as a
:class:`~.compiled.CompiledProgram` naming it, with the program rebuilt from the component's ``.pt2`` (the package's
weights: it holds none), which the runner loads after checking the target (and only when the user trusts native
code: :func:`.safety.check`).

The components of one export are written together (:func:`save_programs`): the weights several of them hold are
stored once, in ``shared.safetensors``, which their archives name (see :mod:`._shared`).
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from ...formats import SafetyOptions
from ...manifest import ComponentEntry
from ._pt2 import read_pt2
from ._shared import open_shared, plan_shared, write_shared
from ._writer import write_pt2
from .compiled import CompiledProgram
from .config import LAYOUT, SHARED_WEIGHTS
from .safety import refuse_untrusted_native

__all__ = ["load_program", "read_program", "save_program", "save_programs"]


def _names(component: str) -> tuple[str, str]:
    """``(<component>.pt2, <component>.aoti.pt2)``."""
    names = list(LAYOUT.component_files(component))
    return names[0], names[1]


def save_program(
    program: Any,
    directory: Path,
    component: str,
    shared: dict[str, str] | None = None,
    sizes: dict[str, int] | None = None,
) -> list[str]:
    """Write ``<component>.pt2`` (:func:`.write_pt2`: the archive ``torch.export.save`` writes, less the payloads
    ``shared`` names in the shared weights file, whose sizes are ``sizes``); a compiled program also copies its
    package to ``<component>.aoti.pt2``."""
    name, native = _names(component)
    if not isinstance(program, CompiledProgram):
        write_pt2(program, Path(directory) / name, shared, sizes)
        return [name]
    # a compiled program loaded from disk holds its program rebuilt: written again, it names this save's shared file
    write_pt2(program.exported, Path(directory) / name, shared, sizes)
    shutil.copyfile(program.package, Path(directory) / native)
    return [name, native]


def save_programs(programs: dict[str, Any], directory: Path) -> dict[str, list[str]]:
    """Save the components of one export (:func:`save_program` each), storing a weight two or more of them hold once
    in ``shared.safetensors``; returns each component's files, its ``.pt2`` first."""
    directory = Path(directory)
    plan = plan_shared({name: _exported(program) for name, program in programs.items()})
    if plan.tensors:
        write_shared(plan, directory / SHARED_WEIGHTS)
    sizes = {key: t.numel() * t.element_size() for key, t in plan.tensors.items()}
    written = {}
    for name, program in programs.items():
        files = save_program(program, directory, name, plan.users.get(name), sizes)
        if plan.users.get(name):
            files.insert(1, SHARED_WEIGHTS)
        written[name] = files
    return written


def _exported(program: Any) -> Any:
    """The ``ExportedProgram`` a component's ``.pt2`` is written from."""
    return program.exported if isinstance(program, CompiledProgram) else program


def load_program(directory: Path, component: str, entry: ComponentEntry, options: SafetyOptions | None = None) -> Any:
    """The component's ``ExportedProgram``, rebuilt from its checked ``.pt2`` (the file found by its exact name).

    A compiled component is returned as a :class:`CompiledProgram` naming its package and holding the program
    rebuilt from its ``.pt2``, whose tensors (mapped, not copied; those of ``shared.safetensors`` once per process)
    the runner hands the package as its constants after checking the target.

    Raises:
        UnsafeExportError: The archive is not what ``torch.export.save`` writes, or would run code (see
            :mod:`.safety`).
    """
    options = options or SafetyOptions()
    paths = LAYOUT.paths(component, [f.path for f in entry.files])
    name = paths["program"]
    size = next(f.size for f in entry.files if f.path == name)
    shared = open_shared(directory, paths, entry)
    try:
        if "native" in paths:
            refuse_untrusted_native(paths["native"], component, options)  # also when the check was skipped
        built = read_pt2(Path(directory) / name, name, options=options, expected_size=size, build=True, shared=shared)
        if "native" in paths:
            return CompiledProgram(
                package=Path(directory) / paths["native"],
                target=dict(entry.extra.get("target") or {}),
                exported=built.program,
                program_path=Path(directory) / name,
            )
        return built.program
    finally:
        if shared is not None:
            shared.close()


def read_program(path: Path, label: str, options: SafetyOptions, expected_size: int | None = None) -> Any:
    """A ``.pt2`` archive's ``ExportedProgram``, checked and rebuilt as the component loader does (never
    ``torch.export.load``)."""
    return read_pt2(path, label, options=options, expected_size=expected_size, build=True).program
