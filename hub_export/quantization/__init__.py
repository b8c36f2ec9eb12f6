"""Export quantizers: pass one as ``quantizer=`` of an export config.

* :class:`OnnxRuntimeQuantizer` (ONNX exports): ``quantize_dynamic`` / ``quantize_static`` of ONNX Runtime.
* :class:`NNCFQuantizer` (OpenVINO, ONNX and Dynamo exports; ExecuTorch: int8 weight compression):
  ``nncf.compress_weights`` / ``nncf.quantize``.
* :class:`PT2EQuantizer` (every format): torchao's ``prepare_pt2e``/``convert_pt2e`` on the traced graph.

The recipe is recorded in the manifest (component ``quantization``); a loaded export does not re-run it.
"""

from __future__ import annotations

from .base import Calibration, ExportQuantizer
from .nncf_quant import NNCFQuantizationConfig, NNCFQuantizer, NNCFWeightCompressionConfig
from .ort import OnnxRuntimeDynamicConfig, OnnxRuntimeQuantizer, OnnxRuntimeStaticConfig
from .pt2e import PT2EQuantizer

__all__ = [
    "Calibration",
    "ExportQuantizer",
    "NNCFQuantizationConfig",
    "NNCFQuantizer",
    "NNCFWeightCompressionConfig",
    "OnnxRuntimeDynamicConfig",
    "OnnxRuntimeQuantizer",
    "OnnxRuntimeStaticConfig",
    "PT2EQuantizer",
]
