"""hub_export: export Transformers models to torch.export, ONNX, ExecuTorch and OpenVINO, run them with the
model's own call, and manage the exports on the Hugging Face Hub.

The API mirrors the experimental exporters module of Transformers 5.23: a user switches by importing each name
from ``hub_export`` instead. Heavy modules (torch, backends) load on first use of the name that needs them.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

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
    UnknownFormatError,
    UnsafeExportError,
)
from .formats import ExportFormat

# public name -> module that defines it (imported lazily)
_LAZY = {
    "ExportConfig": "configs",
    "DynamoConfig": "configs",
    "OnnxConfig": "configs",
    "ExecutorchConfig": "configs",
    "OpenVINOConfig": "configs",
    "AutoExportConfig": "configs",
    "HfExporter": "exporters.base",
    "DynamoExporter": "exporters.dynamo",
    "OnnxExporter": "exporters.onnx",
    "ExecutorchExporter": "exporters.executorch",
    "OpenVINOExporter": "exporters.openvino",
    "AutoHfExporter": "exporters.auto",
    "ExportedModel": "model",
    "ExportedComponent": "model",
    "ExportMetadata": "model",
    "ExportedModelForCausalLM": "generation.mixin",
    "ExportedModelForSeq2SeqLM": "generation.mixin",
    "ModelRunner": "runners.base",
    "Manifest": "manifest",
    "TensorSpec": "signature",
    "publish": "hub.publish",
    "PublishResult": "hub.publish",
    "load_source": "hub.source",
    "pipeline": "pipelines",
    "sync": "hub.sync",
    "decompose_for_generation": "generation.decompose",
    "ExportQuantizer": "quantization",
    "OnnxRuntimeQuantizer": "quantization",
    "OnnxRuntimeDynamicConfig": "quantization",
    "OnnxRuntimeStaticConfig": "quantization",
    "NNCFQuantizer": "quantization",
    "NNCFWeightCompressionConfig": "quantization",
    "NNCFQuantizationConfig": "quantization",
    "PT2EQuantizer": "quantization",
}

__all__ = [
    "__version__",
    "ExportFormat",
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
