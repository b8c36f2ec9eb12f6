"""Save and load ONNX programs: ``<stem>.onnx`` + ``<stem>.onnx_data`` (initializers of 1 KiB or more), the stem
the one :mod:`.conventions` gives a component (``model``), or the component's name.

The components of one export are written together (:func:`save_programs`): a tensor several of them read (the
weights ``prefill`` and ``decode`` share) is written once, to ``shared.onnx.data``, which each of their graphs
refers to; a component's own data file holds only what no other component reads.

A loaded program is an ``onnx_ir.Model`` whose initializers stay lazy ``ExternalTensor`` objects in the data file;
it remembers the ``.onnx`` file it came from (:func:`program_path`) so ONNX Runtime opens that file itself.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ...errors import UnsafeExportError
from ...formats import SafetyOptions
from ...manifest import ComponentEntry
from ._weights import write_programs
from .config import LAYOUT, SHARED_DATA

__all__ = ["PATH_META_KEY", "load_program", "program_path", "save_program", "save_programs"]

#: Key of ``onnx_ir.Model.meta`` holding the ``.onnx`` file a loaded program came from (never serialized).
PATH_META_KEY = "hub_export.onnx_path"


def program_path(program: Any) -> str | None:
    """The ``.onnx`` file a loaded program came from, or None for a program built in memory."""
    meta = getattr(program, "meta", None)
    return None if meta is None else meta.get(PATH_META_KEY)


def save_program(program: Any, directory: Path, component: str) -> list[str]:
    """``<component>.onnx``, initializers of 1 KiB or more in ``<component>.onnx_data`` (written even when empty),
    streamed from the memory they live in and hashed as they are written."""
    return save_programs({component: program}, directory)[component]


def save_programs(programs: dict[str, Any], directory: Path) -> dict[str, list[str]]:
    """Write the components of one export, each shared tensor once in ``shared.onnx.data`` (see the module
    docstring); returns each component's files, its ``.onnx`` first."""
    files = {name: tuple(LAYOUT.component_files(name)) for name in programs}
    return write_programs(programs, Path(directory), files, SHARED_DATA)  # type: ignore[arg-type]


def load_program(directory: Path, component: str, entry: ComponentEntry, options: SafetyOptions | None = None) -> Any:
    """The graph without its weights: initializers stay lazy ``ExternalTensor`` objects in ``.onnx_data``.

    The path is kept unresolved in ``program.meta`` (see :func:`program_path`): ONNX Runtime opens it and finds
    the data file beside it, also when both are symlinks into the huggingface_hub cache. Lazy tensors of a
    symlinked data file are pointed at its target, which ``onnx_ir`` otherwise refuses to read.

    Raises:
        UnsafeExportError: ``onnx_ir`` cannot parse the graph.
    """
    import onnx_ir as ir

    name = LAYOUT.paths(component, [f.path for f in entry.files])["program"]
    path = Path(directory) / name
    try:
        model = ir.load(str(path))
    except Exception as exc:  # noqa: BLE001 - protobuf DecodeError, ValueError...: the file is not a valid graph
        raise UnsafeExportError(f"{name}: not a valid ONNX model ({type(exc).__name__}: {str(exc)[:200]}).") from None
    _follow_symlinked_data(model, path.parent)
    model.meta[PATH_META_KEY] = str(path)
    return model


def _follow_symlinked_data(model: Any, base_dir: Path) -> None:
    """Point lazy tensors stored in a symlinked data file at the file it links to."""
    import onnx_ir as ir

    for graph in model.graphs():
        for value in graph.initializers.values():
            tensor = value.const_value
            if not isinstance(tensor, ir.ExternalTensor):
                continue
            link = base_dir / tensor.location
            if not link.is_symlink():
                continue
            target = link.resolve()
            value.const_value = ir.ExternalTensor(
                target.name,
                tensor.offset,
                tensor.length,
                tensor.dtype,
                shape=tensor.shape,
                name=tensor.name,
                base_dir=str(target.parent),
            )
