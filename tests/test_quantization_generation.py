"""Quantized generation exports: calibration prompts decomposed per component, and PT2E lowered to ExecuTorch."""

from __future__ import annotations

import copy
import dataclasses
from collections import Counter

import pytest
import torch
from tiny_models import build, text_inputs

from hub_export import (
    ExecutorchConfig,
    ExecutorchExporter,
    ExportedModel,
    ExportError,
    NNCFQuantizer,
    NNCFWeightCompressionConfig,
    OnnxConfig,
    OnnxExporter,
    OnnxRuntimeQuantizer,
    OnnxRuntimeStaticConfig,
    OnnxRuntimeWeightOnlyConfig,
    OpenVINOConfig,
    OpenVINOExporter,
    PT2EQuantizer,
)
from hub_export.backends.executorch.io import program_contents
from hub_export.backends.onnx import exporter as onnx_exporter
from hub_export.quantization import base as quantization_base

PROMPTS = [text_inputs(1, 5, seed=11), text_inputs(2, 9, pad_left=2, seed=12), text_inputs(1, 12, seed=13)]


def test_calibration_prompts_are_captured_per_component(monkeypatch, tmp_path):
    case = build("llama")
    seen: dict[str, list[list[int]]] = {}
    original = quantization_base.calibration_for

    def spy(quantizer, traced):
        calibration = original(quantizer, traced)
        names = [spec.name for spec in traced.signature.inputs]
        key = "decode" if any(n.startswith("input.past_key_values") for n in names) else "prefill"
        cache = names.index("input.past_key_values.0.key") if key == "decode" else names.index("input_ids")
        seen[key] = [list(sample[cache].shape) for sample in calibration.samples]
        return calibration

    monkeypatch.setattr(onnx_exporter, "calibration_for", spy)  # where the ONNX exporter looks it up
    # uint8 weights: u8u8 products cannot saturate on a CPU without VNNI (AVX2), so the bound below holds on any CPU
    static = OnnxRuntimeStaticConfig(calibration_dataset=PROMPTS, per_channel=True, weight_type="uint8")
    quantizer = OnnxRuntimeQuantizer(static)
    exported = OnnxExporter().export_for_generation(
        case.model, case.sample, config=OnnxConfig(dynamic=True, quantizer=quantizer)
    )
    # each component calibrated on what it receives for each prompt: the prompt, then one token against its cache
    assert seen["prefill"] == [[1, 5], [2, 9], [1, 12]]
    assert seen["decode"] == [[1, 2, 5, 8], [2, 2, 9, 8], [1, 2, 12, 8]]
    assert quantizer.calibration_dataset == PROMPTS  # the caller's quantizer is left as it was
    for component in exported.components.values():
        assert component.metadata.quantization["calibration_samples"] == 3
        assert {"QuantizeLinear", "DequantizeLinear"} <= {n.op_type for g in component.program.graphs() for n in g}
    loaded = ExportedModel.from_pretrained(exported.save_pretrained(tmp_path / "export"))
    produced = loaded.generate(**PROMPTS[1], max_new_tokens=4)
    assert produced.shape == (2, 13) and torch.equal(produced[:, :9], PROMPTS[1]["input_ids"])
    with torch.no_grad():  # quantized, not exact: the first new token's logits stay close to eager's
        eager = case.model(**PROMPTS[1]).logits[:, -1]
    prefill = loaded.runners["prefill"](**PROMPTS[1], position_ids=PROMPTS[1]["attention_mask"].cumsum(-1) - 1)
    assert float((prefill.logits[:, -1] - eager).abs().max()) < 0.05


def _tied_llama() -> torch.nn.Module:
    """The tiny Llama with tied input/output embeddings, its table (288 x 32) large enough that the exporter keeps
    one copy and transposes it at run time, as at real sizes."""
    from transformers import LlamaForCausalLM

    config = build("llama").model.config
    config.vocab_size, config.tie_word_embeddings = 288, True
    torch.manual_seed(0)
    return LlamaForCausalLM(config).eval()


def test_int4_weight_only_generation_export(tmp_path):
    """MatMulNBits int4 on the CPU-fused generation graphs: every MatMul by a weight is quantized (lm_head too), the
    tied embedding is looked up in the lm_head's quantized weights (the float table is not stored), the recipe is
    recorded per component, and the saved export generates what the in-memory one does."""
    case = build("llama")
    case.model = _tied_llama()
    quantizer = OnnxRuntimeQuantizer(OnnxRuntimeWeightOnlyConfig(block_size=16))
    config = OnnxConfig(dynamic=True, ort_fusions="cpu", quantizer=quantizer)
    exported = OnnxExporter().export_for_generation(case.model, case.sample, config=config)
    for component in exported.components.values():
        nodes = [n for g in component.program.graphs() for n in g]
        quantized = [n for n in nodes if n.op_type == "MatMulNBits"]
        assert quantized and all(n.domain == "com.microsoft" for n in quantized)
        assert {(n.attributes["bits"].value, n.attributes["block_size"].value) for n in quantized} == {(4, 16)}
        weights = [n for n in nodes if n.op_type in ("MatMul", "FusedMatMul") and n.inputs[1].const_value is not None]
        assert not weights, [n.name for n in weights]  # no float matmul by a constant weight is left
        (lookup,) = [n for n in nodes if n.op_type == "GatherBlockQuantized"]  # the embedding reads the lm_head's
        head = next(n for n in quantized if n.attributes["N"].value == 288)
        assert lookup.inputs[0].producer().inputs[0] is head.inputs[1] and lookup.inputs[2] is head.inputs[2]
        tables = [v for v in component.program.graph.initializers.values() if v.const_value.size == 288 * 32]
        assert not tables, [v.name for v in tables]  # no float copy of the table is left
        assert component.metadata.quantization["settings"]["mode"] == "weight_only"
        assert "GroupQueryAttention" in component.metadata.extra["contrib_ops"]  # fused first, then quantized
    prompt = PROMPTS[1]
    expected = exported.generate(**prompt, max_new_tokens=5)
    folder = exported.save_pretrained(tmp_path / "int4")
    assert sum(f.stat().st_size for f in folder.glob("*.onnx_data")) < 288 * 32 * 4  # smaller than the float table
    loaded = ExportedModel.from_pretrained(folder)
    assert torch.equal(loaded.generate(**prompt, max_new_tokens=5), expected)
    with torch.no_grad():
        eager = case.model(**prompt).logits[:, -1]
    from hub_export.generation.loop import _empty_cache

    assert loaded.generation["one_graph"] is True  # weight-only: the quantized decode graph also runs the prompt
    graph = loaded.runners[loaded.generation["stages"]["prefill"]]
    positions = (prompt["attention_mask"].cumsum(-1) - 1).clamp(min=0)
    empty = _empty_cache(graph, "past_key_values", prompt["input_ids"].shape[0])
    prefill = graph(**prompt, position_ids=positions, past_key_values=empty)
    assert float((prefill.logits[:, -1] - eager).abs().max()) < 0.25 * float(eager.abs().max())


def _xnnpack(dynamic: bool):
    from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import (
        XNNPACKQuantizer,
        get_symmetric_quantization_config,
    )

    return XNNPACKQuantizer().set_global(get_symmetric_quantization_config(is_per_channel=True, is_dynamic=dynamic))


def test_pt2e_quantized_program_lowers_to_executorch(tmp_path):
    """PT2E dynamic int8 (XNNPACK's default recipe) on the traced graph, then XNNPACK: the quantized linears run in
    the delegate. Static shapes: dynamic shapes with dynamically quantized activations are refused (next test);
    calibrated static int8 under dynamic shapes lowers too (checked by script: max abs diff 0.03). One layer: lowering
    time grows with the graph, and every linear of a layer is checked to run in the delegate."""
    case = build("llama", layers=1)
    config = ExecutorchConfig(quantizer=PT2EQuantizer(_xnnpack(True)))
    exported = ExecutorchExporter().export(case.model, case.sample, config=config)
    component = exported.components["model"]
    assert component.metadata.quantization["quantizer"] == "PT2EQuantizer"
    operators, delegates = program_contents(component.program)
    assert "XnnpackBackend" in delegates
    assert not {t for t in operators if "quantize_per" in t or "linear" in t}, operators  # all inside XNNPACK
    with torch.no_grad():
        expected = case.model(**case.sample).logits
    logits = exported(**case.sample).logits
    diff = float((logits - expected).abs().max())
    assert 1e-5 < diff < 0.02, diff  # measured 0.0037
    loaded = ExportedModel.from_pretrained(exported.save_pretrained(tmp_path / "export"))
    torch.testing.assert_close(loaded(**case.sample).logits, logits, atol=1e-6, rtol=0)


def test_dynamic_activation_quantization_with_dynamic_shapes_names_the_way_out(monkeypatch):
    """Refused with the way out, after one lowering: XNNPACK's grouping fails whichever ops are kept whole, so the
    node-by-node lowering (for a kept node XNNPACK refuses) is not tried after it."""
    import executorch.exir

    lowerings, lower = [], executorch.exir.to_edge_transform_and_lower
    monkeypatch.setattr(
        executorch.exir, "to_edge_transform_and_lower", lambda *a, **k: lowerings.append(1) or lower(*a, **k)
    )
    case = build("llama", layers=1)  # one decoder layer already groups its linears into a cycle
    config = ExecutorchConfig(dynamic=True, quantizer=PT2EQuantizer(_xnnpack(True)))
    with pytest.raises(ExportError, match="export with dynamic=False, or calibrate a static quantization"):
        ExecutorchExporter().export(case.model, case.sample, config=config)
    assert len(lowerings) == 1


def _nbits_tensors(model) -> dict[str, tuple]:
    """``MatMulNBits`` output name -> (its attributes, the bytes of its weights and scales)."""
    found = {}
    for graph in model.graphs():
        for node in graph:
            if node.op_type == "MatMulNBits":
                attributes = tuple(sorted((k, a.value) for k, a in node.attributes.items()))
                found[node.outputs[0].name] = (attributes, *(v.const_value.tobytes() for v in node.inputs[1:3]))
    return found


def test_weight_only_quantization_in_memory_writes_what_ort_quantizer_writes(tmp_path):
    """The export quantizes one weight at a time in memory with ONNX Runtime's own quantizer, and its nodes and
    tensors are exactly those ``MatMulNBitsQuantizer`` writes for the whole saved model; the quantized tensors are
    read from a temporary file (not held in memory), which goes with the export."""
    import gc
    import os

    import onnx_ir as ir
    from onnxruntime.quantization.matmul_nbits_quantizer import DefaultWeightOnlyQuantConfig, MatMulNBitsQuantizer

    from hub_export.backends.onnx._weight_only import spill_directory_of

    case = build("llama", layers=1)
    plain = OnnxExporter().export(case.model, case.sample, config=OnnxConfig())
    folder = plain.save_pretrained(tmp_path / "plain")
    (source,) = [p for p in folder.glob("*.onnx")]
    settings = {"block_size": 16, "is_symmetric": True, "accuracy_level": 4, "bits": 4}
    reference = MatMulNBitsQuantizer(
        str(source), **settings, algo_config=DefaultWeightOnlyQuantConfig(**settings, op_types_to_quantize=("MatMul",))
    )
    reference.process()
    expected = _nbits_tensors(ir.from_proto(reference.model.model))

    quantizer = OnnxRuntimeQuantizer(OnnxRuntimeWeightOnlyConfig(block_size=16))
    exported = OnnxExporter().export(case.model, case.sample, config=OnnxConfig(quantizer=quantizer))
    program = exported.components["model"].program
    assert len(expected) == 8 and _nbits_tensors(program) == expected  # q/k/v and gate/up packed; lm_head
    spill = spill_directory_of(program)
    assert spill is not None and os.path.isdir(spill)
    del exported, program
    gc.collect()
    assert not os.path.exists(spill)


def test_bfloat16_model_exports_to_int4_onnx_computing_in_float32(tmp_path):
    """ONNX Runtime has no bfloat16 kernels, but a weight-only quantized export of a bfloat16 model runs: its weights
    are quantized from the bfloat16 ones (exactly as from their float32 copy), the graph computes in float32 inside
    (fused for the CPU like a float32 graph) and keeps bfloat16 at its inputs and outputs (eager's cache and logits
    dtype), and it generates after a save."""
    import onnx_ir as ir

    case = build("llama", layers=1)
    quantizer = OnnxRuntimeQuantizer(OnnxRuntimeWeightOnlyConfig(block_size=16))
    config = OnnxConfig(dynamic=True, ort_fusions="cpu", quantizer=quantizer)
    model = case.model.to(torch.bfloat16)
    exported = OnnxExporter().export_for_generation(model, case.sample, config=config)
    (component,) = exported.components.values()
    graph = component.program.graph
    assert component.metadata.extra["computes_in"] == "float32"
    assert "GroupQueryAttention" in component.metadata.extra["contrib_ops"]  # its cache is returned through a Cast
    edges = {id(v) for v in [*graph.inputs, *graph.outputs]}
    inner = [v.name for n in graph for v in n.outputs if v.dtype == ir.DataType.BFLOAT16 and id(v) not in edges]
    assert not inner, inner
    assert {s.dtype for s in component.metadata.signature.outputs} == {"bfloat16"}
    widened = copy.deepcopy(model).float()
    from_float = OnnxExporter().export_for_generation(widened, case.sample, config=config)
    ours = {name.removesuffix("__float32"): v for name, v in _nbits_tensors(component.program).items()}
    assert ours == _nbits_tensors(from_float.components["decode"].program)
    prompt = PROMPTS[1]
    produced = exported.generate(**prompt, max_new_tokens=5)
    loaded = ExportedModel.from_pretrained(exported.save_pretrained(tmp_path / "int4"))
    assert torch.equal(loaded.generate(**prompt, max_new_tokens=5), produced)
    with torch.no_grad():  # quantized, not exact: the first new token's logits stay close to eager bfloat16's
        eager = model(**prompt).logits[:, -1].float()
    graph = loaded.runners[loaded.generation["stages"]["prefill"]]
    from hub_export.generation.loop import _empty_cache

    positions = (prompt["attention_mask"].cumsum(-1) - 1).clamp(min=0)
    empty = _empty_cache(graph, "past_key_values", prompt["input_ids"].shape[0])
    logits = graph(**prompt, position_ids=positions, past_key_values=empty).logits[:, -1]
    assert logits.dtype == torch.bfloat16
    assert float((logits.float() - eager).abs().max()) < 0.25 * float(eager.abs().max())


def _compressed_constants(program) -> list[tuple]:
    """The (type, shape, bytes) of an OpenVINO program's int4/int8 weights and their float16 scales, sorted."""
    kinds = ("i4", "u4", "i8", "u8", "f16")
    found = []
    for op in program.get_ordered_ops():
        kind = op.get_output_element_type(0).get_type_name()
        if op.get_type_name() == "Constant" and kind in kinds and op.get_byte_size() > 64:
            found.append((kind, str(op.get_output_partial_shape(0)), op.get_data().tobytes()))
    return sorted(found)


def _compiled_layers(program) -> Counter:
    """(layer type, output precision) -> count in the CPU plugin's compiled graph under the float32 hint."""
    import openvino

    compiled = openvino.Core().compile_model(program, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    layers = Counter()
    for op in compiled.get_runtime_model().get_ordered_ops():
        info = op.get_rt_info()
        layers[(info["layerType"].astype(str), info["outputPrecisions"].astype(str))] += 1
    return layers


def test_bfloat16_model_compresses_to_int4_openvino_computing_in_float32(tmp_path):
    """NNCF's int4 weights of a bfloat16 model run compressed: the graph computes in float32 inside (the CPU plugin
    decompressed every weight of the bfloat16 graph when it compiled it under the float32 hint), so the compiled
    graph keeps the int4 weights and the attention fused with the cache state exactly as for the float32 model; the
    weights and scales are those NNCF makes from the float32 copy, the export generates that copy's tokens after a
    save, and its inputs and outputs keep eager's bfloat16."""
    from openvino import Type

    case = build("llama", layers=1)
    config = OpenVINOConfig(
        dynamic=True, quantizer=NNCFQuantizer(NNCFWeightCompressionConfig("int4_sym", group_size=16))
    )
    model = copy.deepcopy(case.model).to(torch.bfloat16)
    exported = OpenVINOExporter().export_for_generation(model, case.sample, config=config)
    (component,) = exported.components.values()
    program = component.program
    assert component.metadata.extra["computes_in"] == "float32"
    assert {s.dtype for s in component.metadata.signature.outputs} == {"bfloat16"}
    computing = [  # what stays bfloat16: the constants (read through a decompression Convert) and the outputs
        op.get_friendly_name()
        for op in program.get_ordered_ops()
        if op.get_output_element_type(0) == Type.bf16
        and op.get_type_name() != "Constant"
        and not all(t.get_node().get_type_name() == "Result" for t in op.output(0).get_target_inputs())
    ]
    assert not computing, computing
    from_float = copy.deepcopy(model).float()
    reference = OpenVINOExporter().export_for_generation(from_float, case.sample, config=config)
    expected = reference.components["decode"].program
    assert _compressed_constants(program) == _compressed_constants(expected)
    layers, float_layers = _compiled_layers(program), _compiled_layers(expected)
    assert layers[("Const", "i4")] == float_layers[("Const", "i4")] == 7  # q/k/v/o, gate/up/down stay int4
    assert layers[("ScaledDotProductAttention", "f32")] == 1  # fused with the state, as for the float32 model
    prompt = PROMPTS[1]
    produced = exported.generate(**prompt, max_new_tokens=5)
    assert torch.equal(produced, reference.generate(**prompt, max_new_tokens=5))
    loaded = ExportedModel.from_pretrained(exported.save_pretrained(tmp_path / "int4"))
    assert torch.equal(loaded.generate(**prompt, max_new_tokens=5), produced)
    stateless = OpenVINOExporter().export_for_generation(
        model, case.sample, config=dataclasses.replace(config, stateful=False)
    )
    assert torch.equal(stateless.generate(**prompt, max_new_tokens=5), produced)


def test_nncf_compresses_large_openvino_weights_a_slice_of_rows_at_a_time_into_mapped_files(monkeypatch):
    """Sliced by rows (here every weight, in slices of 7 rows), NNCF's compression of each weight is byte for byte its
    compression of the whole weight: the int4 groups and the int8 embedding and output projection alike. Written to
    files and mapped back (here every constant), the export reads the same bytes and computes the same logits."""
    import numpy as np

    from hub_export.patches import nncf as nncf_patches
    from hub_export.patches._base import held_memory

    case = build("llama", layers=1)
    model = case.model.to(torch.bfloat16)
    config = OpenVINOConfig(quantizer=NNCFQuantizer(NNCFWeightCompressionConfig("int4_sym", group_size=16)))
    in_memory = OpenVINOExporter().export(model, case.sample, config=config)
    whole = in_memory.components["model"].program
    from nncf.quantization.algorithms.weight_compression import openvino_backend

    rows_compressed = []
    compress_weight = openvino_backend.compress_weight

    def counted(weight, *args, **kwargs):
        rows_compressed.append(weight.shape[0])
        return compress_weight(weight, *args, **kwargs)

    monkeypatch.setattr(openvino_backend, "compress_weight", counted)
    monkeypatch.setattr(nncf_patches, "SLICED_MIN_ELEMENTS", 0)
    monkeypatch.setattr(nncf_patches, "SLICE_ROWS", 7)
    monkeypatch.setattr(nncf_patches, "MAPPED_MIN_BYTES", 0)
    exported = OpenVINOExporter().export(model, case.sample, config=config)
    sliced = exported.components["model"].program
    assert rows_compressed and max(rows_compressed) <= 7  # every weight went through in slices
    expected = _compressed_constants(whole)
    assert len(expected) >= 16 and _compressed_constants(sliced) == expected  # 7 int4 weights, 2 int8, scales
    assert len([held for held in held_memory(sliced) if isinstance(held, np.memmap)]) >= 16
    torch.testing.assert_close(exported(**case.sample).logits, in_memory(**case.sample).logits, atol=0, rtol=0)
