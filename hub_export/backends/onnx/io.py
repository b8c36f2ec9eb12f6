"""Save and load ONNX programs: ``<component>.onnx`` + ``<component>.onnx.data`` (initializers of 1 KiB or more).

A loaded program is an ``onnx_ir.Model`` whose initializers stay lazy ``ExternalTensor`` objects in the data file;
it remembers the ``.onnx`` file it came from (:func:`program_path`) so ONNX Runtime opens that file itself.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ...errors import UnsafeExportError
from ...formats import SafetyOptions
from ...manifest import ComponentEntry
from .config import LAYOUT

__all__ = ["PATH_META_KEY", "load_program", "program_path", "save_program"]

#: Key of ``onnx_ir.Model.meta`` holding the ``.onnx`` file a loaded program came from (never serialized).
PATH_META_KEY = "hub_export.onnx_path"
#: Initializers of at least this many bytes go to the external data file.
_EXTERNAL_MIN_BYTES = 1024


def program_path(program: Any) -> str | None:
    """The ``.onnx`` file a loaded program came from, or None for a program built in memory."""
    meta = getattr(program, "meta", None)
    return None if meta is None else meta.get(PATH_META_KEY)


def save_program(program: Any, directory: Path, component: str) -> list[str]:
    """``onnx_ir.save`` to ``<component>.onnx``, initializers of 1 KiB or more in ``<component>.onnx.data``.

    Both files are always written (the data file is empty when no initializer is large enough).
    """
    import onnx_ir as ir

    main, data = LAYOUT.component_files(component)
    path = Path(directory) / main
    ir.save(program, str(path), external_data=data, size_threshold_bytes=_EXTERNAL_MIN_BYTES - 1)
    (Path(directory) / data).touch(exist_ok=True)
    return [main, data]


def load_program(directory: Path, component: str, entry: ComponentEntry, options: SafetyOptions | None = None) -> Any:
    """The graph without its weights: initializers stay lazy ``ExternalTensor`` objects in ``.onnx.data``.

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
