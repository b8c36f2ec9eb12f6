"""``OpenVINOConfig``: export to OpenVINO IR (``openvino_model.xml`` + ``.bin``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ...configs import ExportConfig
from ...formats import ExportFormat, FileLayout

__all__ = ["FORMAT", "LAYOUT", "OpenVINOConfig"]

FORMAT = ExportFormat.declare("openvino")
#: ``openvino_<component>.xml`` (graph) + ``openvino_<component>.bin`` (weights), in ``openvino/`` on the Hub.
LAYOUT = FileLayout(subfolder="openvino", files=((".xml", "program"), (".bin", "weights")), prefix="openvino_")


@dataclass
class OpenVINOConfig(ExportConfig):
    """Export to OpenVINO IR (``openvino_model.xml`` + ``.bin``).

    Attributes:
        compress_to_fp16: Store weights as fp16.
        stateful: Keep a generation model's KV cache as internal state.
    """

    export_format: ClassVar[ExportFormat] = FORMAT
    compress_to_fp16: bool = False
    stateful: bool = True
