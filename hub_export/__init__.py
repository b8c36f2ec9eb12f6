"""hub_export: export Transformers models to torch.export, ONNX, ExecuTorch and OpenVINO, run them with the
model's own call, and manage the exports on the Hugging Face Hub.

The API mirrors the experimental exporters module of Transformers 5.23: a user switches by importing each name
from ``hub_export`` instead. Heavy modules (torch, backends) load on first use of the name that needs them.
"""

from __future__ import annotations

import importlib
from typing import Any

from ._versions import __version__
from .errors import (
    BackendUnavailableError,
    ConfigError,
    DeviceUnavailableError,
    ExportError,
    HubError,
    HubExportError,
    InputBoundsError,
    InputError,
    IntegrityError,
    ManifestError,
    ParityError,
    PatchTargetMissing,
    UnknownFormatError,
    UnsafeExportError,
)
from .formats import Backend, ExportFormat, FileLayout, SafetyOptions, register_backend

# public name -> module that defines it (imported lazily)
_LAZY = {
    "ExportConfig": "configs",
    "AutoExportConfig": "configs",
    "DynamoConfig": "backends.dynamo",
    "OnnxConfig": "backends.onnx",
    "ExecutorchConfig": "backends.executorch",
    "OpenVINOConfig": "backends.openvino",
    "HfExporter": "export.exporter",
    "Lowered": "export.exporter",
    "DynamoExporter": "backends.dynamo",
    "OnnxExporter": "backends.onnx",
    "ExecutorchExporter": "backends.executorch",
    "OpenVINOExporter": "backends.openvino",
    "AutoHfExporter": "export.auto",
    "ExportedModel": "model",
    "ExportedModelForCausalLM": "model",
    "ExportedModelForSeq2SeqLM": "model",
    "ExportedComponent": "component",
    "ExportMetadata": "component",
    "ModelRunner": "runner",
    "Manifest": "manifest",
    "Dim": "dims",
    "Signature": "signature",
    "TensorSpec": "signature",
    "publish": "hub.publish",
    "PublishResult": "hub.publish",
    "load_source": "hub.source",
    "pipeline": "pipelines",
    "sync": "hub.sync",
    "decompose_for_generation": "generation.decompose",
    "ExportQuantizer": "quantization",
    "OnnxRuntimeQuantizer": "backends.onnx.quantization",
    "OnnxRuntimeDynamicConfig": "backends.onnx.quantization",
    "OnnxRuntimeStaticConfig": "backends.onnx.quantization",
    "OnnxRuntimeWeightOnlyConfig": "backends.onnx.quantization",
    "NNCFQuantizer": "quantization",
    "NNCFWeightCompressionConfig": "quantization",
    "NNCFQuantizationConfig": "quantization",
    "PT2EQuantizer": "quantization",
    "show_third_party_output": "_quiet",
}

__all__ = [
    "__version__",
    "Backend",
    "ExportFormat",
    "FileLayout",
    "SafetyOptions",
    "register_backend",
    *_LAZY,
    "BackendUnavailableError",
    "ConfigError",
    "DeviceUnavailableError",
    "ExportError",
    "HubError",
    "HubExportError",
    "InputBoundsError",
    "InputError",
    "IntegrityError",
    "ManifestError",
    "UnknownFormatError",
    "UnsafeExportError",
    "ParityError",
    "PatchTargetMissing",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'hub_export' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
