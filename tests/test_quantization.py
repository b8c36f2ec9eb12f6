"""Quantized exports (hub_export.quantization) and ONNX Runtime fusions on tiny models.

A Llama with hidden size 128 (so int8 matters) is exported once per quantizer. Bounds were measured on it and
are asserted with a margin: max |logits - eager| (logits std ~0.6) and top-1 argmax agreement over the
2 x 16 sample positions. Measured: ORT dynamic 0.025 / 0.91, ORT static QDQ 0.105 / 0.78, NNCF ONNX int8 0.013 /
0.91, NNCF ONNX int8 quantize 0.143 / 0.91, OpenVINO int8 weights 0.014 / 0.94, int4 weights 0.108 / 0.78, NNCF int8
quantize 0.142 / 0.88, NNCF int8 quantize on the FX graph (Dynamo) 0.140 / 0.91.
"""

from __future__ import annotations

import importlib.util
from collections import Counter

import pytest
import torch
from tiny_models import build, text_inputs

from hub_export import (
    BackendUnavailableError,
    ConfigError,
    DynamoConfig,
    DynamoExporter,
    ExecutorchConfig,
    ExecutorchExporter,
    ExportedModel,
    NNCFQuantizationConfig,
    NNCFQuantizer,
    NNCFWeightCompressionConfig,
    OnnxConfig,
    OnnxExporter,
    OnnxRuntimeDynamicConfig,
    OnnxRuntimeQuantizer,
    OnnxRuntimeStaticConfig,
    OnnxRuntimeWeightOnlyConfig,
    OpenVINOConfig,
    OpenVINOExporter,
    PT2EQuantizer,
)


@pytest.fixture(scope="module")
def wide_llama():
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=256,
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
    )
    model = LlamaForCausalLM(config).eval()
    sample = text_inputs(2, 16, vocab=256)
    with torch.no_grad():
        logits = model(**sample).logits
    fp32_bytes = sum(p.numel() * 4 for p in model.parameters())
    return model, sample, logits, fp32_bytes


CALIBRATION = [text_inputs(2, 16, vocab=256, seed=s) for s in range(1, 5)]

# name -> (exporter, config factory, max abs diff bound, min argmax agreement, expected ops, weight bytes / fp32 max)
CASES = {
    "ort_dynamic": (
        OnnxExporter,
        # 7-bit weights: u8s8 products cannot saturate on a CPU without VNNI (AVX2), so the bound holds on every CPU
        lambda: OnnxConfig(
            quantizer=OnnxRuntimeQuantizer(OnnxRuntimeDynamicConfig(per_channel=True, reduce_range=True))
        ),
        0.06,
        0.8,
        {"DynamicQuantizeLinear", "MatMulInteger"},
        0.5,
    ),
    "ort_static": (
        OnnxExporter,
        lambda: OnnxConfig(
            quantizer=OnnxRuntimeQuantizer(OnnxRuntimeStaticConfig(calibration_dataset=CALIBRATION, per_channel=True))
        ),
        0.25,
        0.65,
        {"QuantizeLinear", "DequantizeLinear"},
        0.6,
    ),
    "ort_int4_weight_only": (
        OnnxExporter,
        lambda: OnnxConfig(quantizer=OnnxRuntimeQuantizer(OnnxRuntimeWeightOnlyConfig())),
        0.25,
        0.65,
        {"MatMulNBits"},
        0.5,
    ),
    "nncf_onnx_int8": (
        OnnxExporter,
        lambda: OnnxConfig(quantizer=NNCFQuantizer(NNCFWeightCompressionConfig())),
        0.04,
        0.8,
        {"DequantizeLinear"},
        0.5,
    ),
    "nncf_onnx_int8_quantize": (
        OnnxExporter,
        lambda: OnnxConfig(quantizer=NNCFQuantizer(NNCFQuantizationConfig(calibration_dataset=CALIBRATION))),
        0.3,
        0.7,
        {"QuantizeLinear", "DequantizeLinear"},
        0.6,
    ),
    "ov_int8_weights": (
        OpenVINOExporter,
        lambda: OpenVINOConfig(quantizer=NNCFQuantizer(NNCFWeightCompressionConfig())),
        0.04,
        0.8,
        {"u8"},
        0.3,
    ),
    "ov_int4_weights": (
        OpenVINOExporter,
        lambda: OpenVINOConfig(quantizer=NNCFQuantizer(NNCFWeightCompressionConfig(mode="int4_sym", group_size=32))),
        0.25,
        0.65,
        {"i4"},
        0.2,
    ),
    "ov_int8_quantize": (
        OpenVINOExporter,
        lambda: OpenVINOConfig(quantizer=NNCFQuantizer(NNCFQuantizationConfig(calibration_dataset=CALIBRATION))),
        0.3,
        0.7,
        {"FakeQuantize", "i8"},
        0.3,
    ),
}


def _ops(program) -> set[str]:
    """ONNX op types, or OpenVINO op types plus the element types of its constants."""
    if hasattr(program, "get_ops"):
        ops = set()
        for op in program.get_ops():
            ops.add(op.get_type_name())
            if op.get_type_name() == "Constant":
                ops.add(op.get_output_element_type(0).get_type_name())
        return ops
    nodes = [n for g in program.graphs() for n in g]
    return {n.op_type for n in nodes}


@pytest.mark.parametrize("name", list(CASES))
def test_quantized_export(name, wide_llama, tmp_path):
    model, sample, expected, fp32_bytes = wide_llama
    exporter, make_config, bound, agreement, ops, size_ratio = CASES[name]
    config = make_config()
    exported = exporter().export(model, sample, config=config)
    component = exported.components["model"]
    assert ops <= _ops(component.program)
    logits = exported(**sample).logits
    assert torch.isfinite(logits).all()
    diff = float((logits - expected).abs().max())
    assert 1e-5 < diff < bound, diff  # quantized (not bit-exact) but close
    assert float((logits.argmax(-1) == expected.argmax(-1)).float().mean()) >= agreement

    recipe = component.metadata.quantization
    assert recipe == config.quantizer.to_dict()
    assert recipe["quantizer"] == type(config.quantizer).__name__
    assert recipe["calibration_samples"] == (4 if "static" in name or "quantize" in name else 0)

    exported.save_pretrained(tmp_path)
    weights = sum(p.stat().st_size for p in tmp_path.iterdir() if p.suffix in {".data", ".onnx_data", ".bin", ".onnx"})
    assert weights < size_ratio * fp32_bytes, (weights, fp32_bytes)
    loaded = ExportedModel.from_pretrained(tmp_path)
    assert loaded.components["model"].metadata.quantization == recipe
    torch.testing.assert_close(loaded(**sample).logits, logits, atol=1e-5, rtol=0)


def test_quantizer_configs_save_as_plain_data():
    config = OnnxConfig(quantizer=OnnxRuntimeQuantizer(OnnxRuntimeStaticConfig(calibration_dataset=CALIBRATION[:2])))
    data = config.to_dict()["quantizer"]
    assert data == {
        "quantizer": "OnnxRuntimeQuantizer",
        "settings": {
            "activation_type": "uint8",
            "weight_type": "int8",
            "quant_format": "QDQ",
            "per_channel": False,
            "op_types": None,
            "calibrate_method": "MinMax",
            "mode": "static",
        },
        "calibration_samples": 2,
    }
    assert (
        NNCFQuantizer(NNCFWeightCompressionConfig(mode="int4_asym", group_size=64)).to_dict()["settings"]["group_size"]
        == 64
    )
    nncf = NNCFQuantizer(NNCFQuantizationConfig(calibration_dataset=CALIBRATION), calibration_dataset=CALIBRATION[:1])
    assert nncf.to_dict()["calibration_samples"] == 1 and nncf.needs_calibration  # an explicit dataset wins
    with pytest.raises(ConfigError, match="weight_type"):
        OnnxRuntimeDynamicConfig(weight_type="int3")
    with pytest.raises(ConfigError, match="mode"):
        NNCFWeightCompressionConfig(mode="int2")
    weight_only = OnnxRuntimeQuantizer(OnnxRuntimeWeightOnlyConfig(block_size=128, accuracy_level=0)).to_dict()
    assert weight_only["settings"]["mode"] == "weight_only" and weight_only["settings"]["op_types"] == ["MatMul"]
    assert weight_only["settings"]["block_size"] == 128 and weight_only["calibration_samples"] == 0
    for bad in ({"bits": 3}, {"block_size": 48}, {"accuracy_level": 5}, {"op_types": ["Conv"]}):
        with pytest.raises(ConfigError, match=next(iter(bad))):
            OnnxRuntimeWeightOnlyConfig(**bad)


def test_quantizer_for_another_format_is_refused():
    case = build("llama")
    config = OpenVINOConfig(quantizer=OnnxRuntimeQuantizer())
    with pytest.raises(ConfigError, match="OnnxRuntimeQuantizer quantizes onnx"):
        OpenVINOExporter().export(case.model, case.sample, config=config)


@pytest.mark.parametrize(
    "missing, quantizer", [("nncf", lambda: NNCFQuantizer()), ("onnxruntime", lambda: OnnxRuntimeQuantizer())]
)
def test_missing_quant_package(monkeypatch, missing, quantizer):
    case = build("llama")
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == missing else real(name, *a))
    config = (OpenVINOConfig if missing == "nncf" else OnnxConfig)(quantizer=quantizer())
    exporter = OpenVINOExporter if missing == "nncf" else OnnxExporter
    if missing == "onnxruntime":  # the ONNX exporter itself needs onnxruntime: its own error names the onnx extra
        with pytest.raises(BackendUnavailableError, match="onnxruntime"):
            exporter().export(case.model, case.sample, config=config)
        return
    with pytest.raises(BackendUnavailableError, match=r"NNCFQuantizer needs 'nncf'.*hub-export\[quant\]"):
        exporter().export(case.model, case.sample, config=config)


def _xnnpack_dynamic():
    from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import (
        XNNPACKQuantizer,
        get_symmetric_quantization_config,
    )

    return XNNPACKQuantizer().set_global(get_symmetric_quantization_config(is_per_channel=True, is_dynamic=True))


def test_pt2e_quantizer_on_the_traced_graph(tmp_path):
    """PT2E (XNNPACK dynamic int8) on a dynamic one-layer Llama: measured max abs diff 0.0043 on the other inputs."""
    case = build("llama", layers=1)
    quantizer = PT2EQuantizer(_xnnpack_dynamic())
    exported = DynamoExporter().export(case.model, case.sample, config=DynamoConfig(dynamic=True, quantizer=quantizer))
    component = exported.components["model"]
    targets = Counter(str(n.target) for n in component.program.graph.nodes)
    linears = 7 * case.model.config.num_hidden_layers  # q, k, v, o, gate, up, down: every one's int8 weight
    assert targets["quantized_decomposed.dequantize_per_channel.default"] >= linears
    assert targets["quantized_decomposed.choose_qparams.tensor"] >= 1  # dynamic activation scales
    with torch.no_grad():
        expected = case.model(**case.other).logits
    logits = exported(**case.other).logits
    assert 1e-5 < float((logits - expected).abs().max()) < 0.02
    assert component.metadata.quantization == {
        "quantizer": "PT2EQuantizer",
        "settings": {"pt2e_quantizer": "executorch.backends.xnnpack.quantizer.xnnpack_quantizer.XNNPACKQuantizer"},
        "calibration_samples": 0,
    }
    exported.save_pretrained(tmp_path)
    torch.testing.assert_close(ExportedModel.from_pretrained(tmp_path)(**case.other).logits, logits, atol=1e-6, rtol=0)
    with pytest.raises(ConfigError, match="PT2EQuantizer works with dynamo, executorch exports, not 'onnx'"):
        OnnxExporter().export(case.model, case.sample, config=OnnxConfig(quantizer=quantizer))


# -- ORT fusions ------------------------------------------------------------------------------------------
FUSED = {  # per-provider fusions and their parity on generation graphs: tests/test_ort_fusions.py
    "llama": {"GroupQueryAttention", "RotaryEmbedding", "SkipSimplifiedLayerNormalization"},
    "gpt2": {"FastGelu", "GroupQueryAttention", "SkipLayerNormalization"},
    "bert": {"MultiHeadAttention", "SkipLayerNormalization", "BiasGelu"},
}


@pytest.mark.parametrize("name", list(FUSED))
def test_ort_fusions_parity_and_manifest(name, tmp_path):
    case = build(name, layers=1)  # each fusion is per layer (the generation graphs: tests/test_ort_fusions.py)
    exported = OnnxExporter().export(case.model, case.sample, config=OnnxConfig(ort_fusions="cpu", dynamic=True))
    component = exported.components["model"]
    ops = Counter(n.op_type for n in component.program.graph if n.domain == "com.microsoft")
    assert FUSED[name] <= set(ops)
    assert component.metadata.extra == {"ort_fusions": "cpu", "contrib_ops": sorted(ops)}
    with torch.no_grad():
        expected = case.model(**case.other)
    key = "logits"
    torch.testing.assert_close(exported(**case.other)[key], expected[key], atol=1e-4, rtol=0)
    assert component.metadata.parity["max_abs_diff"] < 1e-4
    exported.save_pretrained(tmp_path)
    assert ExportedModel.from_pretrained(tmp_path).components["model"].metadata.extra["contrib_ops"] == sorted(ops)


def test_quantized_graph_skips_fusions():
    import onnx_ir as ir

    from hub_export.backends.onnx.exporter import _fuse_for_ort

    x = ir.Value(name="x", shape=ir.Shape([2, 4]), type=ir.TensorType(ir.DataType.FLOAT))
    node = ir.node("DynamicQuantizeLinear", [x], num_outputs=3)
    graph = ir.Graph([x], [node.outputs[0]], nodes=[node], opset_imports={"": 20})
    with pytest.warns(UserWarning, match="already quantized: skipping ort_fusions"):
        _fuse_for_ort(ir.Model(graph, ir_version=10), "cpu")
    assert [n.op_type for n in graph] == ["DynamicQuantizeLinear"]


@pytest.mark.parametrize("mode, bound, agreement", [("int8_asym", 0.02, 0.9), ("int4_sym", 0.15, 0.75)])
def test_nncf_weight_compression_on_the_fx_graph(wide_llama, tmp_path, mode, bound, agreement):
    """NNCF's TorchFX backend on a Dynamo export: int8/int4 weight buffers and their decompression in the .pt2."""
    model, sample, expected, fp32_bytes = wide_llama
    quantizer = NNCFQuantizer(NNCFWeightCompressionConfig(mode=mode, group_size=32))
    exported = DynamoExporter().export(model, sample, config=DynamoConfig(quantizer=quantizer))
    program = exported.components["model"].program
    stored = {**program.state_dict, **program.constants}
    compressed = sum(t.numel() * t.element_size() for t in stored.values() if t.dtype in (torch.int8, torch.uint8))
    floats = sum(t.numel() * t.element_size() for t in stored.values() if t.dtype.is_floating_point)
    assert compressed > floats  # the weights are now integers (scales stay float)
    assert compressed + floats < 0.3 * fp32_bytes  # measured 0.25x (int8); the .pt2 itself is mostly graph JSON here
    logits = exported(**sample).logits
    diff = float((logits - expected).abs().max())
    assert 1e-5 < diff < bound, diff
    assert float((logits.argmax(-1) == expected.argmax(-1)).float().mean()) >= agreement
    assert exported.components["model"].metadata.quantization["settings"]["mode"] == mode
    exported.save_pretrained(tmp_path)
    torch.testing.assert_close(ExportedModel.from_pretrained(tmp_path)(**sample).logits, logits, atol=1e-6, rtol=0)


def test_nncf_quantization_on_the_fx_graph(wide_llama, tmp_path):
    """nncf.quantize (NNCF TorchFX) on a dynamic Dynamo export, calibrated on the samples: quantize/dequantize ops on
    the activations, int8 weight buffers. Measured 0.140 / 0.91 on the sample, 0.100 on another shape."""
    model, sample, expected, fp32_bytes = wide_llama
    quantizer = NNCFQuantizer(NNCFQuantizationConfig(calibration_dataset=CALIBRATION))
    exported = DynamoExporter().export(model, sample, config=DynamoConfig(dynamic=True, quantizer=quantizer))
    component = exported.components["model"]
    program = component.program
    targets = Counter(str(n.target) for n in program.graph.nodes)
    assert targets["quantized_decomposed.quantize_per_tensor.default"] >= 15  # measured 19: every Linear's input
    assert targets["quantized_decomposed.dequantize_per_tensor.default"] >= 15
    stored = {**program.state_dict, **program.constants}
    int8 = sum(t.numel() for t in stored.values() if t.dtype == torch.int8)
    floats = sum(t.numel() * t.element_size() for t in stored.values() if t.dtype.is_floating_point)
    assert int8 > floats  # measured 330 KB int8, 149 KB float (the fp32 embedding, scales)
    assert int8 + floats < 0.4 * fp32_bytes  # measured 0.33x
    logits = exported(**sample).logits
    diff = float((logits - expected).abs().max())
    assert 1e-5 < diff < 0.3, diff
    assert float((logits.argmax(-1) == expected.argmax(-1)).float().mean()) >= 0.7
    other = text_inputs(1, 7, vocab=256, seed=9)  # the symbolic axes survived quantization
    with torch.no_grad():
        assert float((exported(**other).logits - model(**other).logits).abs().max()) < 0.25
    recipe = component.metadata.quantization
    assert recipe["calibration_samples"] == 4 and recipe["settings"]["method"] == "quantize"
    exported.save_pretrained(tmp_path)
    loaded = ExportedModel.from_pretrained(tmp_path)
    assert loaded.components["model"].metadata.quantization == recipe
    torch.testing.assert_close(loaded(**sample).logits, logits, atol=1e-6, rtol=0)


@pytest.mark.parametrize(
    "config, match",
    [
        (NNCFWeightCompressionConfig(mode="int4_sym", group_size=32), "int4_sym weight compression does not lower"),
        (NNCFQuantizationConfig(), "full int8 quantization .* does not lower to ExecuTorch.*PT2EQuantizer"),
    ],
)
def test_nncf_is_refused_for_executorch_before_tracing(config, match):
    quantizer = NNCFQuantizer(config)
    with pytest.raises(ConfigError, match=match):
        ExecutorchExporter().export(object(), {"x": torch.zeros(1)}, config=ExecutorchConfig(quantizer=quantizer))
