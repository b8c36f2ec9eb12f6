"""Export quantizers: pass one as ``quantizer=`` of an export config.

* ``OnnxRuntimeQuantizer`` (ONNX exports, in the ONNX backend package): ONNX Runtime's quantizers.
* :class:`NNCFQuantizer` (OpenVINO, ONNX and Dynamo exports; ExecuTorch: int8 weight compression):
  ``nncf.compress_weights`` / ``nncf.quantize``.
* :class:`PT2EQuantizer` (every format): torchao's ``prepare_pt2e``/``convert_pt2e`` on the traced graph.

The recipe is recorded in the manifest (component ``quantization``); a loaded export does not re-run it.
"""

from __future__ import annotations

from .base import Calibration, ExportQuantizer
from .nncf_quant import NNCFQuantizationConfig, NNCFQuantizer, NNCFWeightCompressionConfig
from .pt2e import PT2EQuantizer

__all__ = [
    "Calibration",
    "ExportQuantizer",
    "NNCFQuantizationConfig",
    "NNCFQuantizer",
    "NNCFWeightCompressionConfig",
    "PT2EQuantizer",
]
