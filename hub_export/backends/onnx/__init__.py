"""The ``onnx`` backend: ONNX graphs (``torch.onnx.export(dynamo=True)``), run by ONNX Runtime."""

from __future__ import annotations

from ...formats import Backend, register_backend
from . import conventions, io, quantization, safety
from .config import FORMAT, LAYOUT, OnnxConfig
from .exporter import OnnxExporter
from .runner import OnnxRunner

__all__ = ["BACKEND", "OnnxConfig", "OnnxExporter", "OnnxRunner"]

BACKEND = register_backend(
    Backend(
        name=str(FORMAT),
        config_class=OnnxConfig,
        exporter_class=OnnxExporter,
        runner_class=OnnxRunner,
        layout=LAYOUT,
        save_program=io.save_program,
        save_programs=io.save_programs,
        load_program=io.load_program,
        check_files=safety.check,
        file_stem=conventions.file_stem,
        runtime_files=conventions.write_runtime_files,
        root_config_keys=(conventions.TRANSFORMERS_JS_CONFIG,),
        packages=("onnx", "onnxscript", "onnx_ir", "onnxruntime"),
        distributions=("onnx", "onnxscript", "onnx-ir", "onnxruntime"),
        extra="onnx",
        card_tags=("onnx",),
        quantization_stage="onnx",
        weight_quantizer=quantization.weight_quantizer,
        description="ONNX graph (.onnx + .onnx_data), run by ONNX Runtime on CPU or CUDA",
    )
)
