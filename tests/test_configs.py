"""Configs: JSON round-trip (Dims included), AutoExportConfig / AutoHfExporter dispatch and their errors."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch

from hub_export import (
    AutoExportConfig,
    AutoHfExporter,
    ConfigError,
    DynamoConfig,
    DynamoExporter,
    ExecutorchConfig,
    ExportFormat,
    OnnxConfig,
    OpenVINOConfig,
    UnknownFormatError,
)
from hub_export.export.auto import exporter_class
from hub_export.formats import backend_for, register_backend


def test_round_trip_with_dims_is_exact() -> None:
    batch = torch.export.Dim("batch", min=1, max=32)
    seq = torch.export.Dim("seq", min=2, max=2048)
    open_dim = torch.export.Dim("open")
    config = OnnxConfig(
        dynamic_shapes={
            "input_ids": {0: batch, 1: seq},
            "attention_mask": {0: batch, 1: open_dim},
            "pixel_values": (None, 3, torch.export.Dim.AUTO),
        },
        prefer_deferred_runtime_asserts_over_guards=True,
        opset_version=18,
    )
    data = json.loads(json.dumps(config.to_dict()))
    back = AutoExportConfig.from_dict(data)
    assert isinstance(back, OnnxConfig) and back.opset_version == 18
    shapes = back.dynamic_shapes
    assert shapes["input_ids"][0].__name__ == "batch" and (shapes["input_ids"][0].min, shapes["input_ids"][0].max) == (
        1,
        32,
    )
    assert shapes["input_ids"][1].__name__ == "seq" and shapes["input_ids"][1].max == 2048
    assert shapes["attention_mask"][1].__name__ == "open" and shapes["attention_mask"][1].min == 0
    assert isinstance(shapes["pixel_values"], tuple) and shapes["pixel_values"][1] == 3
    assert shapes["pixel_values"][2] == torch.export.Dim.AUTO
    assert back.to_dict() == config.to_dict()
    assert "Dim(" not in json.dumps(data)  # no repr, real data


@pytest.mark.parametrize("cls", [DynamoConfig, OnnxConfig, ExecutorchConfig, OpenVINOConfig])
def test_every_config_round_trips(cls) -> None:
    config = cls(dynamic=True)
    back = AutoExportConfig.from_dict(config.to_dict())
    assert type(back) is cls and back == config
    assert back.to_dict()["export_format"] == cls.export_format.value


def test_auto_config_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    from hub_export import formats

    formats.backends()  # every built-in registered, then in the order another import sequence would leave them
    monkeypatch.setattr(formats, "_BACKENDS", dict(reversed(list(formats._BACKENDS.items()))))
    assert list(formats.backends())[:4] == ["dynamo", "executorch", "onnx", "openvino"]
    with pytest.raises(UnknownFormatError, match="dynamo, executorch, onnx, openvino"):
        AutoExportConfig.from_dict({"export_format": "tflite"})
    with pytest.raises(ConfigError, match="Unknown OnnxConfig field"):
        AutoExportConfig.from_dict({"export_format": "onnx", "dynamc": True})
    with pytest.raises(ConfigError, match="export_format"):
        AutoExportConfig.from_dict({"dynamic": True})
    with pytest.raises(ConfigError, match="OnnxConfig is for 'onnx'"):
        OnnxConfig.from_dict({"export_format": "dynamo"})
    with pytest.raises(ConfigError, match="bool"):
        DynamoConfig(dynamic="yes")
    with pytest.raises(ConfigError, match="not both"):
        DynamoConfig(dynamic=True, dynamic_shapes={"input_ids": {0: torch.export.Dim("b")}})
    with pytest.raises(ConfigError, match="derived"):
        DynamoConfig(dynamic_shapes={"x": {0: 2 * torch.export.Dim("b")}}).to_dict()
    with pytest.raises(ConfigError, match="backend"):
        ExecutorchConfig(backend="coreml")
    with pytest.raises(ConfigError, match="optimize"):
        OnnxConfig(ort_fusions="cpu", optimize=False)


def test_auto_exporter_dispatch() -> None:
    assert isinstance(AutoHfExporter.from_config(DynamoConfig()), DynamoExporter)
    assert type(AutoHfExporter.from_config({"export_format": "dynamo", "dynamic": True})) is DynamoExporter
    for fmt in ExportFormat:
        assert exporter_class(fmt).export_format is fmt
    with pytest.raises(UnknownFormatError, match="known formats"):
        AutoHfExporter.from_format("coreml")
    with pytest.raises(ConfigError, match="already registered"):
        register_backend(dataclasses.replace(backend_for("onnx"), description="another ONNX"))


def test_exporter_refuses_another_formats_config() -> None:
    with pytest.raises(ConfigError, match="AutoHfExporter"):
        DynamoExporter().export(torch.nn.Linear(2, 2), {"input": torch.ones(1, 2)}, config=OnnxConfig())


def test_a_format_looked_up_by_name_imports_its_own_backend_package_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """Loading an export names its format: the other built-in backends (their exporters and runtimes) stay
    unimported until something lists every format."""
    from hub_export import formats

    packages = formats._builtin_packages()
    assert {"dynamo", "onnx", "openvino"} <= set(packages)
    imported: list[str] = []
    monkeypatch.setattr(formats, "_builtin_packages", lambda: packages)
    monkeypatch.setattr(formats, "_DISCOVERED", False)
    monkeypatch.setattr(formats, "_BACKENDS", {})
    monkeypatch.setattr(formats.importlib, "import_module", lambda name: imported.append(name))
    formats._discover("openvino")
    assert imported == ["hub_export.backends.openvino"]
    assert formats._DISCOVERED is False  # a later listing still imports the rest
    formats._discover()
    assert imported[1:] == [f"hub_export.backends.{n}" for n in packages]
    assert formats._DISCOVERED is True
