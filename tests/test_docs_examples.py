"""The examples of the exporters documentation (shared/reference/exporters-api.zh.md) run with
``from hub_export import ...`` and a tiny model in place of the Hub download.

ExecuTorch's examples are the same calls with ``ExecutorchExporter``/``ExecutorchConfig`` and are exercised by
tests/test_executorch.py (dynamic export, save, load and run; explicit ``Dim`` bounds honoured exactly).
"""

from __future__ import annotations

import pytest
import torch
from tiny_models import build, text_inputs

from hub_export import (
    AutoExportConfig,
    AutoHfExporter,
    DynamoConfig,
    DynamoExporter,
    ExportedModel,
    OnnxConfig,
    OnnxExporter,
    OpenVINOConfig,
    OpenVINOExporter,
)
from hub_export.dims import Dim


@pytest.fixture(scope="module")
def llama():
    case = build("llama", layers=1)  # the examples make single calls
    return case.model, case.sample  # inputs = tokenizer("Hello, world!", return_tensors="pt")


def test_dynamo_example(llama) -> None:
    model, inputs = llama
    exporter = DynamoExporter()
    config = DynamoConfig(dynamic=True)
    exported = exporter.export(model, inputs, config=config)
    outputs = exported(**inputs)
    assert torch.allclose(outputs.logits, model(**inputs).logits, atol=1e-5)
    assert isinstance(exported.program, torch.export.ExportedProgram)


def test_onnx_example_save_and_load(llama, tmp_path) -> None:
    model, inputs = llama
    exporter = OnnxExporter()
    config = OnnxConfig(dynamic=True)
    exported = exporter.export(model, inputs, config=config)
    exported.save_pretrained(tmp_path / "qwen3-onnx")
    outputs = ExportedModel.from_pretrained(tmp_path / "qwen3-onnx")(**inputs)
    assert torch.allclose(outputs.logits, model(**inputs).logits, atol=1e-4)
    assert sorted(p.name for p in (tmp_path / "qwen3-onnx").iterdir()) == [
        "config.json",
        "decoder_model.onnx",  # a causal LM's forward without a cache: not model.onnx (docs/interop.md)
        "decoder_model.onnx_data",
        "export.json",
        "generation_config.json",
    ]


def test_openvino_example_to_cpu(llama, tmp_path) -> None:
    model, inputs = llama
    exporter = OpenVINOExporter()
    config = OpenVINOConfig(dynamic=True)
    exported = exporter.export(model, inputs, config=config)
    exported.save_pretrained(tmp_path / "qwen3-openvino")
    outputs = exported.to("cpu")(**inputs)
    assert torch.allclose(outputs.logits, model(**inputs).logits, atol=1e-4)


def test_auto_example(llama) -> None:
    model, inputs = llama
    export_config_dict = {"export_format": "onnx", "dynamic": True}
    config = AutoExportConfig.from_dict(export_config_dict)
    exporter = AutoHfExporter.from_config(config)
    exported = exporter.export(model, inputs, config=config)
    assert isinstance(exporter, OnnxExporter)
    assert torch.allclose(exported(**inputs).logits, model(**inputs).logits, atol=1e-4)


@pytest.mark.parametrize(
    "exporter_cls, config_cls",
    [(DynamoExporter, DynamoConfig), (OnnxExporter, OnnxConfig), (OpenVINOExporter, OpenVINOConfig)],
)
def test_dynamic_shapes_example(llama, exporter_cls, config_cls) -> None:
    model, _ = llama
    inputs = text_inputs(2, 9, pad_left=4)  # tokenizer(["Hello, world!", "Hi"], padding=True)
    batch = torch.export.Dim("batch", min=1, max=32)
    seq = torch.export.Dim("seq", min=1, max=2048)
    exporter = exporter_cls()
    config = config_cls(
        dynamic_shapes={"input_ids": {0: batch, 1: seq}, "attention_mask": {0: batch, 1: seq}},
        prefer_deferred_runtime_asserts_over_guards=True,
    )
    exported = exporter.export(model, inputs, config=config)
    dims = exported.components["model"].metadata.signature.dims
    assert dims["batch"] == Dim("batch", 1, 32)
    other = text_inputs(3, 14, pad_left=2, seed=3)
    with torch.no_grad():
        expected = model(**other).logits
    assert torch.allclose(exported(**other).logits, expected, atol=1e-4)


def test_extending_example_runs_as_written(tmp_path) -> None:
    """The first python block of docs/extending.md registers a toy backend, exports, saves, loads and compares with
    eager; run as is in a fresh interpreter (its registration must not leak into the other tests)."""
    import re
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    text = (root / "docs" / "extending.md").read_text(encoding="utf-8")
    block = re.search(r"```python\n(.*?)```", text, re.S)
    assert block is not None
    script = tmp_path / "extending_example.py"
    script.write_text(block.group(1), encoding="utf-8")
    done = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=600, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "toy export matches eager: toy" in done.stdout
