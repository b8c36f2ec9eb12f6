"""``OnnxConfig``: export to ONNX through ``torch.onnx.export(dynamo=True)``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

from ...configs import ExportConfig
from ...errors import ConfigError
from ...formats import ExportFormat, FileLayout

__all__ = ["FORMAT", "LAYOUT", "SHARED_DATA", "OnnxConfig"]

FORMAT = ExportFormat.declare("onnx")
#: External data that several components of one export read (written once; see :mod:`.io`).
SHARED_DATA = "shared.onnx.data"
#: ``<component>.onnx`` and its external data ``<component>.onnx.data``, in ``onnx/`` on the Hub; the weights
#: components share go to ``shared.onnx.data``.
LAYOUT = FileLayout(
    subfolder="onnx", files=((".onnx", "program"), (".onnx.data", "weights")), shared=((SHARED_DATA, "weights"),)
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
