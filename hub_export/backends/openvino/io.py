"""Save and load OpenVINO IR: ``openvino_<component>.xml`` (the graph) + ``openvino_<component>.bin`` (weights).

The components of one export are written together (:func:`save_programs`): those reading the same constants (a
generation export's ``prefill`` and ``decode``) share one ``openvino_shared.bin`` (see ``_shared.py``).
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from ...errors import UnsafeExportError
from ...formats import SafetyOptions
from ...manifest import ComponentEntry
from .config import LAYOUT
from .conventions import mark_precise

__all__ = ["COMPRESS_KEY", "PRECISION_KEY", "core", "load_program", "save_program", "save_programs"]

#: rt_info key holding whether the saved weights are fp16 (read back by :func:`save_program`).
COMPRESS_KEY = ["hub_export", "compress_to_fp16"]
#: rt_info key OpenVINO tools read compile options from; the runner reads it too.
PRECISION_KEY = ["runtime_options", "INFERENCE_PRECISION_HINT"]


@functools.lru_cache(maxsize=1)
def core() -> Any:
    """The process-wide ``openvino.Core``."""
    import openvino

    return openvino.Core()


def _compressed(model: Any) -> bool:
    return model.has_rt_info(COMPRESS_KEY) and model.get_rt_info(COMPRESS_KEY).astype(str) == "True"


def save_program(program: Any, directory: Path, component: str) -> list[str]:
    """``openvino.save_model`` to ``openvino_<component>.xml`` + ``.bin``, keeping the weights' precision; a program
    that promises float32 has its operations marked precise (:func:`.conventions.mark_precise`), so that it computes in
    float32 wherever it is compiled."""
    import openvino

    xml, binary = LAYOUT.component_files(component)
    openvino.save_model(program, str(Path(directory) / xml), compress_to_fp16=_compressed(program))
    if program.has_rt_info(PRECISION_KEY) and program.get_rt_info(PRECISION_KEY).astype(str) == "f32":
        mark_precise(Path(directory) / xml)
    return [xml, binary]


def save_programs(programs: dict[str, Any], directory: Path) -> dict[str, list[str]]:
    """Save each component (:func:`save_program`), then store the constants several of them read once in
    ``openvino_shared.bin``; returns each component's files, its ``.xml`` first."""
    from ._shared import share_weights

    written = {name: save_program(program, directory, name) for name, program in programs.items()}
    return share_weights(Path(directory), written) if len(written) > 1 else written


def load_program(directory: Path, component: str, entry: ComponentEntry, options: SafetyOptions | None = None) -> Any:
    """``Core().read_model(xml, bin)`` with both files found by their exact names in the manifest (never an unlisted
    ``.bin`` beside the XML).

    Raises:
        UnsafeExportError: OpenVINO cannot read the IR.
    """
    paths = LAYOUT.paths(component, [f.path for f in entry.files])
    xml, weights = Path(directory) / paths["program"], Path(directory) / paths["weights"]
    try:
        return core().read_model(str(xml), str(weights))
    except Exception as exc:  # noqa: BLE001 - OpenVINO raises RuntimeError/GeneralFailure on a bad IR
        raise UnsafeExportError(f"{paths['program']}: OpenVINO refused the IR ({str(exc)[:300]}).") from None
