"""ONNX Runtime fusions per execution provider (hub_export.exporters._ort_fusions) on tiny generative models.

Each model is exported once for generation without fusions; every provider's fusions are then applied to copies
of its prefill and decode graphs, which run on ONNX Runtime's CPU provider against eager PyTorch on the captured
generation calls of a left-padded batch (prefill: no cache; decode: one token on the prefill's cache) and of the
sample's shape. Outputs compared: logits and the returned KV cache, every position (padded rows included).
Measured max abs diffs: 0.6e-7 to 1.2e-7 (Qwen3 up to 7.2e-7), asserted < 1e-5. The Llama has head_dim 16 so that
ORT's CPU kernel can rotate inside GroupQueryAttention (head sizes that are multiples of 16); Qwen3 (head_dim 8)
covers the separate RotaryEmbedding; the tiny Llama with head_dim 8 and BERT are checked in test_quantization.py.
"""

from __future__ import annotations

import copy
from collections import Counter
from typing import Any

import pytest
import torch

from hub_export import OnnxConfig, OnnxExporter
from hub_export.exporters._ort_fusions import fuse_for_ort
from hub_export.runners.onnx import OnnxRunner
from hub_export.utils import decompose_for_generation
from tiny_models import build

ATOL = 1e-5


def _case(name: str) -> Any:
    if name != "llama16":
        return build(name)
    from transformers import LlamaForCausalLM

    case = build("llama")
    config = copy.deepcopy(case.model.config)
    config.head_dim = 16
    torch.manual_seed(0)
    case.model = LlamaForCausalLM(config).eval()
    return case


@pytest.fixture(scope="module")
def exports() -> Any:
    cache: dict[str, Any] = {}

    def get(name: str) -> tuple[Any, Any, dict[str, Any]]:
        if name not in cache:
            case = _case(name)
            exported = OnnxExporter().export_for_generation(case.model, case.sample, config=OnnxConfig(dynamic=True))
            calls = {"padded": decompose_for_generation(case.model, case.other), "sample": decompose_for_generation(case.model, case.sample)}
            cache[name] = (case, exported, calls)
        return cache[name]

    return get


def _fused(component: Any, provider: str) -> tuple[Any, dict[str, int]]:
    import onnx_ir as ir

    program = ir.serde.deserialize_model(ir.serde.serialize_model(component.program))
    return program, fuse_for_ort(program, provider)


def _flat(output: Any) -> list[torch.Tensor]:
    cache = output.past_key_values
    return [output.logits, *[t for layer in cache.layers for t in (layer.keys, layer.values)]]


def _max_diff(runner: Any, module: Any, kwargs: dict[str, Any]) -> float:
    with torch.no_grad():
        expected = _flat(module(**copy.deepcopy(kwargs)))
    got = _flat(runner(**copy.deepcopy(kwargs)))
    assert [g.shape for g in got] == [e.shape for e in expected]
    return max(float((g - e).abs().max()) for g, e in zip(got, expected))


def _ops(program: Any) -> Counter:
    return Counter(n.op_type for n in program.graph if n.domain == "com.microsoft")


#: (model, provider) -> contrib ops expected in both the prefill and the decode graph
EXPECTED = {
    ("llama16", "cpu"): {"GroupQueryAttention", "SkipSimplifiedLayerNormalization"},
    ("llama16", "cuda"): {"GroupQueryAttention", "SkipSimplifiedLayerNormalization"},
    ("llama16", "webgpu"): {"GroupQueryAttention", "RotaryEmbedding", "SkipSimplifiedLayerNormalization"},
    ("llama16", "dml"): {"MultiHeadAttention", "RotaryEmbedding", "SkipSimplifiedLayerNormalization"},
    ("qwen3", "cpu"): {"GroupQueryAttention", "RotaryEmbedding", "SkipSimplifiedLayerNormalization"},
    ("gpt2", "cpu"): {"FastGelu", "GroupQueryAttention", "SkipLayerNormalization"},
}


@pytest.mark.parametrize(("name", "provider"), list(EXPECTED), ids=[f"{n}-{p}" for n, p in EXPECTED])
def test_fused_graphs_match_eager(name: str, provider: str, exports: Any) -> None:
    case, exported, calls = exports(name)
    for stage in ("prefill", "decode"):
        component = exported.components[stage]
        program, counts = _fused(component, provider)
        ops = _ops(program)
        assert set(ops) == EXPECTED[name, provider], (stage, ops)
        layers = case.model.config.num_hidden_layers
        attention = "MultiHeadAttention" if provider == "dml" else "GroupQueryAttention"
        assert ops[attention] == layers and counts.get("sdpa") == layers
        if attention == "GroupQueryAttention":
            rotary = {n.attributes.get_int("do_rotary", 0) for n in program.graph if n.op_type == attention}
            assert rotary == {int(name == "llama16" and provider in ("cpu", "cuda"))}
        runner = OnnxRunner.from_program(program, component.metadata)
        for kind, split in calls.items():
            module, kwargs = split[stage]
            assert _max_diff(runner, module, kwargs) < ATOL, (stage, kind)


def test_qkv_packed_into_group_query_attention(exports: Any) -> None:
    _, exported, _ = exports("llama16")
    program, counts = _fused(exported.components["decode"], "cpu")
    nodes = [n for n in program.graph if n.op_type == "GroupQueryAttention"]
    assert counts["packed_matmul"] >= 2 * len(nodes)  # q/k/v and gate/up of each layer
    for node in nodes:  # packed q/k/v: one input, no key/value; the padding mask goes in as attention_bias
        assert node.inputs[0].producer().op_type == "MatMul" and node.inputs[1] is None and node.inputs[2] is None
        assert node.inputs[10] is not None and node.inputs[16] is not None


def test_generate_with_fused_export_matches_eager(exports: Any) -> None:
    """Through the public API, with a decode graph that takes several tokens (GroupQueryAttention's query_seqlens)."""
    case, _, _ = exports("llama16")
    fused = OnnxExporter().export_for_generation(
        case.model, case.sample, config=OnnxConfig(dynamic=True, ort_fusions="cpu"), multi_token_decode=True
    )
    for component in fused.components.values():
        assert component.metadata.extra == {"ort_fusions": "cpu", "contrib_ops": ["GroupQueryAttention", "SkipSimplifiedLayerNormalization"]}
        assert component.metadata.parity["max_abs_diff"] < ATOL
    module, kwargs = decompose_for_generation(case.model, case.other, multi_token_decode=True)["decode"]
    assert kwargs["input_ids"].shape == (3, 2)  # two tokens over the cache of a left-padded batch of 3
    assert _max_diff(fused.components["decode"].runner(), module, kwargs) < ATOL
    with torch.no_grad():
        expected = case.model.generate(**case.other, max_new_tokens=6, do_sample=False, pad_token_id=0)
    assert torch.equal(fused.generate(**case.other, max_new_tokens=6), expected)


def test_unknown_provider_is_refused() -> None:
    import onnx_ir as ir

    graph = ir.Graph([], [], nodes=[], opset_imports={"": 20})
    with pytest.raises(ValueError, match="ort_fusions='tpu': use one of"):
        fuse_for_ort(ir.Model(graph, ir_version=10), "tpu")
