"""``OnnxConfig``: export to ONNX through ``torch.onnx.export(dynamo=True)``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

from ...configs import ExportConfig
from ...errors import ConfigError
from ...formats import ExportFormat, FileLayout
from .conventions import GENAI_CONFIG, STEMS

__all__ = ["FORMAT", "LAYOUT", "SHARED_DATA", "OnnxConfig"]

FORMAT = ExportFormat.declare("onnx")
#: External data that several components of one export read (written once; see :mod:`.io`).
SHARED_DATA = "shared.onnx.data"
#: ``<stem>.onnx`` and its external data ``<stem>.onnx_data``, in ``onnx/`` on the Hub, the stem named as ONNX's own
#: tools load it (``model``, ``model_q4``: :mod:`.conventions`), else the component's name; the weights components
#: share go to ``shared.onnx.data``. Exports made before these names have ``<component>.onnx.data``.
LAYOUT = FileLayout(
    subfolder="onnx",
    files=((".onnx", "program"), (".onnx_data", "weights")),
    shared=((SHARED_DATA, "weights"),),
    stems=STEMS,
    legacy=((".onnx.data", "weights"),),
    extras=((GENAI_CONFIG, "runtime"),),
)
_PROVIDERS = ("cpu", "cuda", "webgpu", "dml")


@dataclass
class OnnxConfig(ExportConfig):
    """Export to ONNX through ``torch.onnx.export(dynamo=True)``.

    Attributes:
        opset_version: ONNX opset; None takes the exporter's default.
        optimize: Run onnxscript's optimizer on the graph.
        ort_fusions: Rewrite into ONNX Runtime fused operators for this execution provider (needs ``optimize``).
    """

    export_format: ClassVar[ExportFormat] = FORMAT
    opset_version: int | None = None
    optimize: bool = True
    ort_fusions: Literal["cpu", "cuda", "webgpu", "dml"] | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.ort_fusions not in (None, *_PROVIDERS):
            raise ConfigError(f"ort_fusions must be None, 'cpu', 'cuda', 'webgpu' or 'dml', got {self.ort_fusions!r}.")
        if self.ort_fusions is not None and not self.optimize:
            raise ConfigError("ort_fusions requires optimize=True.")
