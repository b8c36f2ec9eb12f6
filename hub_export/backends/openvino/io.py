"""Save and load OpenVINO IR: ``openvino_<component>.xml`` (the graph) + ``openvino_<component>.bin`` (weights)."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from ...errors import UnsafeExportError
from ...formats import SafetyOptions
from ...manifest import ComponentEntry
from .config import LAYOUT

__all__ = ["COMPRESS_KEY", "PRECISION_KEY", "core", "load_program", "save_program"]

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
    """``openvino.save_model`` to ``openvino_<component>.xml`` + ``.bin``, keeping the weights' precision."""
    import openvino

    xml, binary = LAYOUT.component_files(component)
    openvino.save_model(program, str(Path(directory) / xml), compress_to_fp16=_compressed(program))
    return [xml, binary]


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
