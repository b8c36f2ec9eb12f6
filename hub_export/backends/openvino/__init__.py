"""The ``openvino`` backend: OpenVINO IR (``.xml`` + ``.bin``), run by OpenVINO Runtime on CPU, GPU or NPU."""

from __future__ import annotations

from ...formats import Backend, one_graph_stem, register_backend
from . import conventions, io, safety
from .config import FORMAT, LAYOUT, OpenVINOConfig, weight_quantizer
from .exporter import OpenVINOExporter
from .runner import OpenVINORunner

__all__ = ["BACKEND", "OpenVINOConfig", "OpenVINOExporter", "OpenVINORunner"]

BACKEND = register_backend(
    Backend(
        name=str(FORMAT),
        config_class=OpenVINOConfig,
        exporter_class=OpenVINOExporter,
        runner_class=OpenVINORunner,
        layout=LAYOUT,
        save_program=io.save_program,
        save_programs=io.save_programs,
        load_program=io.load_program,
        check_files=safety.check,
        file_stem=one_graph_stem,
        runtime_files=conventions.write_runtime_files,
        packages=("openvino",),
        distributions=("openvino", "openvino-tokenizers"),
        extra="openvino",
        card_tags=("openvino",),
        quantization_stage="openvino",
        weight_quantizer=weight_quantizer,
        description="OpenVINO IR (.xml + .bin), run by OpenVINO Runtime on CPU, GPU (xpu) or NPU",
    )
)
