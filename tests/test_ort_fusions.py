"""ONNX Runtime fusions per execution provider (hub_export.exporters._ort_fusions) on tiny generative models.

Each model is exported once for generation without fusions; every provider's fusions are then applied to copies
of its prefill and decode graphs, which run on ONNX Runtime's CPU provider against eager PyTorch on the captured
generation calls of a left-padded batch (prefill: no cache; decode: one token on the prefill's cache) and of the
sample's shape. Outputs compared: logits and the returned KV cache, every position (padded rows included).
Measured max abs diffs: 0.6e-7 to 1.2e-7 (Qwen3, random norm weights: up to 1.7e-6), asserted < 1e-5. The Llama and the Qwen3 have head_dim
16 so that ORT's CPU kernel can rotate inside GroupQueryAttention (head sizes that are multiples of 16); webgpu covers
the separate RotaryEmbedding (Qwen3: its q/k norms before it); the tiny Llama with head_dim 8 and BERT are checked in
test_quantization.py. The Qwen3's RMS norm weights are random (ones would let the optimizer merge q's and k's).
Qwen3 for cuda: its q/k norms go into GroupQueryAttention (q_norm_weight/k_norm_weight), which ORT's CPU kernel
refuses; the runner runs such a graph on the CPU provider through expand_qk_norms (the schema's semantics as standard
nodes), so its parity checks the rewrite, not ORT's CUDA kernel (no GPU here).
Mixture of experts (cuda: one ``com.microsoft::MoE`` per layer, chosen while tracing) is exported with
``ort_fusions="cuda"`` directly: Mixtral for generation, Qwen2-MoE, and small experts blocks of every layout.
"""

from __future__ import annotations

import copy
from collections import Counter
from typing import Any

import pytest
import torch
from tiny_models import build

from hub_export import OnnxConfig, OnnxExporter
from hub_export.backends.onnx._fusions import fuse_for_ort
from hub_export.backends.onnx.runner import OnnxRunner
from hub_export.generation import export as generation_export
from hub_export.utils import decompose_for_generation

ATOL = 1e-5


def _case(name: str) -> Any:
    if name not in ("llama16", "qwen3"):
        return build(name)
    case = build("llama" if name == "llama16" else name)
    config = copy.deepcopy(case.model.config)
    config.head_dim = 16
    torch.manual_seed(0)
    case.model = type(case.model)(config).eval()
    with torch.no_grad():
        for key, weight in case.model.named_parameters():
            if name == "qwen3" and key.endswith("norm.weight"):
                weight.copy_(1 + 0.5 * torch.randn(weight.shape))
    return case


@pytest.fixture(scope="module")
def exports() -> Any:
    cache: dict[str, Any] = {}

    def get(name: str) -> tuple[Any, Any, dict[str, Any]]:
        if name not in cache:
            case = _case(name)
            with pytest.MonkeyPatch.context() as patch:  # a prefill and a decode graph: each stage's fusions checked
                patch.setattr(generation_export, "_export_one_graph", lambda *args: "two graphs (test)")
                exported = OnnxExporter().export_for_generation(
                    case.model, case.sample, config=OnnxConfig(dynamic=True)
                )
            calls = {
                "padded": decompose_for_generation(case.model, case.other),
                "sample": decompose_for_generation(case.model, case.sample),
            }
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
    ("qwen3", "cpu"): {"GroupQueryAttention", "SkipSimplifiedLayerNormalization"},
    ("qwen3", "cuda"): {"GroupQueryAttention", "SkipSimplifiedLayerNormalization"},  # q/k norms inside
    ("qwen3", "webgpu"): {"GroupQueryAttention", "RotaryEmbedding", "SkipSimplifiedLayerNormalization"},
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
            assert rotary == {int(name != "gpt2" and provider in ("cpu", "cuda"))}  # GPT-2: no rotary
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


def test_qk_norms_inside_group_query_attention_for_cuda(exports: Any) -> None:
    """cuda: Qwen3's q/k norms become q_norm_weight/k_norm_weight (packed QKV); other providers keep the nodes."""
    import numpy as np
    import onnx_ir as ir
    import onnxruntime as ort
    from onnxruntime.capi.onnxruntime_pybind11_state import InvalidArgument

    from hub_export.backends.onnx._fusions import expand_qk_norms, runnable_on

    case, exported, calls = exports("qwen3")
    layers, epsilon = case.model.model.layers, np.float32(case.model.config.rms_norm_eps)

    def norms(program: Any) -> int:
        return sum(n.op_type == "SimplifiedLayerNormalization" for n in program.graph)

    def weights(program: Any) -> list[Any]:
        return [
            n.inputs[14] if len(n.inputs) > 14 else None for n in program.graph if n.op_type == "GroupQueryAttention"
        ]

    for stage in ("prefill", "decode"):
        component = exported.components[stage]
        cuda, _ = _fused(component, "cuda")
        for provider in ("cpu", "webgpu"):  # the norms stay nodes before GroupQueryAttention
            other, _ = _fused(component, provider)
            assert norms(other) == norms(cuda) + 2 * len(layers) and weights(other) == [None] * len(layers)
        nodes = [n for n in cuda.graph if n.op_type == "GroupQueryAttention"]
        for node, layer in zip(nodes, layers, strict=True):  # packed q/k/v from the MatMul; the layer's weights
            assert node.inputs[0].producer().op_type == "MatMul" and node.inputs[1] is None and node.inputs[2] is None
            for index, norm in ((14, layer.self_attn.q_norm), (15, layer.self_attn.k_norm)):
                assert np.array_equal(node.inputs[index].const_value.numpy(), norm.weight.detach().numpy())
            assert node.attributes.get_float("qk_norm_epsilon") == epsilon and node.attributes.get_int("do_rotary") == 1
        # ORT 1.32's CPU kernel refuses the norm inputs, so the runner expands them for the CPU provider (a copy)
        session = ort.InferenceSession(ir.to_proto(cuda).SerializeToString(), providers=["CPUExecutionProvider"])
        with pytest.raises(InvalidArgument, match="q_norm_weight / k_norm_weight inputs are not supported"):
            OnnxRunner(session, component.metadata, "cpu")(**copy.deepcopy(calls["sample"][stage][1]))
        assert runnable_on(cuda, [("CUDAExecutionProvider", {}), "CPUExecutionProvider"]) is not cuda  # float32
        expanded = runnable_on(cuda, ["CPUExecutionProvider"])
        assert norms(expanded) == norms(cuda) + 2 * len(layers) and weights(expanded) == [None] * len(layers)
        assert None not in weights(cuda)
        for node in nodes:  # separate epsilons go to their own norm
            node.attributes.pop("qk_norm_epsilon")
            node.attributes["q_norm_epsilon"] = ir.AttrFloat32("q_norm_epsilon", 0.25)
            node.attributes["k_norm_epsilon"] = ir.AttrFloat32("k_norm_epsilon", 0.5)
        assert expand_qk_norms(cuda) == len(layers)
        eps = Counter(
            n.attributes.get_float("epsilon") for n in cuda.graph if n.op_type == "SimplifiedLayerNormalization"
        )
        assert eps[0.25] == eps[0.5] == len(layers)


def test_generate_with_fused_export_matches_eager(exports: Any) -> None:
    """Through the public API, with a decode graph that takes several tokens (GroupQueryAttention's query_seqlens)."""
    case, _, _ = exports("llama16")
    fused = OnnxExporter().export_for_generation(
        case.model, case.sample, config=OnnxConfig(dynamic=True, ort_fusions="cpu"), multi_token_decode=True
    )
    for component in fused.components.values():
        assert component.metadata.extra == {
            "ort_fusions": "cpu",
            "contrib_ops": ["GroupQueryAttention", "SkipSimplifiedLayerNormalization"],
        }
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


# ---- mixture of experts: com.microsoft::MoE for cuda (hub_export.exporters._ort_moe) ----------------------------
# Measured max abs diffs (CPU provider, logits and KV cache): Mixtral prefill/decode 0.6e-7 to 0.9e-7, Qwen2-MoE
# 0.9e-7 to 1.5e-7, the synthetic layouts 1.5e-7 to 4.8e-7 (outputs up to ~3; sigmoid routers, weights not
# renormalised: the rescale by sum(w) is exercised). ``hub_export::moe``'s reference vs ORT's node: < 1e-5 asserted.


def _moe_block(*, has_gate: bool = True, transposed: bool = False, bias: bool = False, act: str = "silu") -> Any:
    """A router (sigmoid, top-2, weights not renormalised) and a ``@use_experts_implementation`` experts module."""
    from torch import nn
    from transformers import PretrainedConfig
    from transformers.activations import ACT2FN
    from transformers.integrations.moe import use_experts_implementation

    experts, hidden, inter = 4, 16, 8

    @use_experts_implementation(has_gate=has_gate, is_transposed=transposed, has_bias=bias)
    class Experts(nn.Module):
        def __init__(self, config: Any) -> None:
            super().__init__()
            self.num_experts = experts
            rows = (2 if has_gate else 1) * inter
            name = "gate_up_proj" if has_gate else "up_proj"
            up, down = ((hidden, rows), (inter, hidden)) if transposed else ((rows, hidden), (hidden, inter))
            setattr(self, name, nn.Parameter(torch.randn(experts, *up) * 0.3))
            self.down_proj = nn.Parameter(torch.randn(experts, *down) * 0.3)
            if bias:
                setattr(self, f"{name}_bias", nn.Parameter(torch.randn(experts, rows) * 0.1))
                self.down_proj_bias = nn.Parameter(torch.randn(experts, hidden) * 0.1)
            self.act_fn = ACT2FN[act]

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            config = PretrainedConfig()
            config._experts_implementation = "grouped_mm"
            self.router = nn.Linear(hidden, experts, bias=False)
            self.experts = Experts(config)

        def forward(self, hidden_states: torch.Tensor) -> dict[str, torch.Tensor]:
            weights, index = self.router(hidden_states).sigmoid().topk(2, dim=-1)
            return {"out": self.experts(hidden_states, index, weights)}

    torch.manual_seed(0)
    return Block().eval()


def _cuda_config() -> OnnxConfig:
    return OnnxConfig(dynamic=True, optimize=True, ort_fusions="cuda")


@pytest.fixture(scope="module")
def moe_exports() -> Any:
    from zoo import build as build_zoo

    cache: dict[str, Any] = {}

    def get(name: str) -> tuple[Any, Any]:
        if name not in cache:
            case = build_zoo(name)
            exporter = OnnxExporter()
            if name == "mixtral":  # prefill + decode
                with pytest.MonkeyPatch.context() as patch:
                    patch.setattr(generation_export, "_export_one_graph", lambda *args: "two graphs (test)")
                    exported = exporter.export_for_generation(case.model, case.sample, config=_cuda_config())
                cache[name] = case, exported
            else:
                cache[name] = case, exporter.export(case.model, case.sample, config=_cuda_config())
        return cache[name]

    return get


@pytest.mark.parametrize("activation", ["swiglu", "swiglu-bias-normalized", "relu", "silu", "gelu"])
def test_reference_moe_matches_onnxruntime(activation: str) -> None:
    """``hub_export::moe``'s eager body is ONNX Runtime's MoE: one node on the CPU provider, same inputs."""
    import onnx
    import onnxruntime as ort
    from onnx import helper

    from hub_export.backends.onnx._moe import moe_op

    tokens, hidden, inter, experts, k = 9, 16, 8, 4, 2
    gen = torch.Generator().manual_seed(0)
    gated, biased = activation.startswith("swiglu"), activation.endswith("normalized")
    kind, normalize = "swiglu" if gated else activation, int(biased)
    fc1 = torch.randn(experts, (2 if gated else 1) * inter, hidden, generator=gen) * 0.3
    fc2 = torch.randn(experts, hidden, inter, generator=gen) * 0.3
    b1 = torch.randn(experts, fc1.shape[1], generator=gen) * 0.1 if biased else None
    b2 = torch.randn(experts, hidden, generator=gen) * 0.1 if biased else None
    x, router = torch.randn(tokens, hidden, generator=gen), torch.randn(tokens, experts, generator=gen)
    weights = {"fc1": fc1, "fc1_bias": b1, "fc2": fc2, "fc2_bias": b2}
    node = helper.make_node(
        "MoE",
        ["x", "router", *[name if w is not None else "" for name, w in weights.items()]],
        ["y"],
        domain="com.microsoft",
        k=k,
        activation_type=kind,
        swiglu_fusion=int(gated),
        activation_alpha=1.0,
        activation_beta=0.0,
        normalize_routing_weights=normalize,
    )
    graph = helper.make_graph(
        [node],
        "moe",
        [helper.make_tensor_value_info(n, onnx.TensorProto.FLOAT, None) for n in ("x", "router")],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)],
        [onnx.numpy_helper.from_array(w.numpy(), name) for name, w in weights.items() if w is not None],
    )
    opsets = [helper.make_opsetid("", 18), helper.make_opsetid("com.microsoft", 1)]
    model = helper.make_model(graph, opset_imports=opsets)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    got = torch.from_numpy(session.run(None, {"x": x.numpy(), "router": router.numpy()})[0])
    expected = moe_op()(x, router, fc1, b1, fc2, b2, k, kind, int(gated), 1.0, 0.0, normalize)
    assert float((got - expected).abs().max()) < ATOL


@pytest.mark.parametrize("stage", ["prefill", "decode"])
def test_mixtral_experts_become_moe_for_cuda(stage: str, moe_exports: Any) -> None:
    case, exported = moe_exports("mixtral")
    component = exported.components[stage]
    graph = component.program.graph
    layers = case.model.config.num_hidden_layers
    assert sum(n.op_type == "MoE" and n.domain == "com.microsoft" for n in graph) == layers
    assert not any(n.op_type == "NonZero" for n in graph)  # no per-expert loop left
    assert "MoE" in component.metadata.extra["contrib_ops"] and component.metadata.extra["ort_fusions"] == "cuda"
    assert component.metadata.parity["max_abs_diff"] < ATOL
    runner = component.runner()
    for inputs in (case.sample, case.other):  # batch 2 x 7, then a left-padded batch 3 x 11
        module, kwargs = decompose_for_generation(case.model, inputs)[stage]
        assert _max_diff(runner, module, kwargs) < ATOL


def test_generate_with_moe_export_matches_eager(moe_exports: Any) -> None:
    case, exported = moe_exports("mixtral")
    with torch.no_grad():
        expected = case.model.generate(**case.other, max_new_tokens=6, do_sample=False, pad_token_id=0)
    assert torch.equal(exported.generate(**case.other, max_new_tokens=6), expected)


def test_qwen2_moe_shared_expert_and_unnormalised_routing(moe_exports: Any) -> None:
    """Qwen2-MoE: a shared expert beside the routed ones, top-k weights not renormalised (the rescale by sum(w))."""
    case, exported = moe_exports("qwen2_moe")
    assert case.model.config.norm_topk_prob is False
    component = exported.components["model"]
    graph = component.program.graph
    assert sum(n.op_type == "MoE" for n in graph) == case.model.config.num_hidden_layers
    assert not any(n.op_type == "NonZero" for n in graph)
    runner = component.runner()
    for inputs in (case.sample, case.other):
        assert _max_diff(runner, case.model, inputs) < ATOL


BLOCKS = {  # name -> (block kwargs, MoE nodes expected)
    "gated-transposed-bias": (dict(transposed=True, bias=True), 1),
    "relu": (dict(has_gate=False, act="relu"), 1),
    "gelu-tanh-bias": (dict(has_gate=False, act="gelu_new", bias=True), 1),
    "gelu-erf": (dict(has_gate=False, act="gelu"), 0),  # ORT's gelu is the tanh form: the loop stays
}


@pytest.mark.parametrize("name", list(BLOCKS))
def test_experts_layouts(name: str) -> None:
    kwargs, nodes = BLOCKS[name]
    block = _moe_block(**kwargs)
    gen = torch.Generator().manual_seed(1)
    sample = {"hidden_states": torch.randn(5, 16, generator=gen)}
    exported = OnnxExporter().export(block, sample, config=_cuda_config())
    graph = exported.components["model"].program.graph
    assert sum(n.op_type == "MoE" for n in graph) == nodes
    assert any(n.op_type == "NonZero" for n in graph) == (not nodes)
    other = {"hidden_states": torch.randn(11, 16, generator=gen)}
    with torch.no_grad():
        expected = block(**other)["out"]
    assert float((exported.components["model"].runner()(**other)["out"] - expected).abs().max()) < ATOL


def test_no_moe_for_other_providers() -> None:
    block = _moe_block()
    config = OnnxConfig(dynamic=True, optimize=True, ort_fusions="cpu")
    exported = OnnxExporter().export(block, {"hidden_states": torch.randn(5, 16)}, config=config)
    assert not any(n.op_type == "MoE" for n in exported.components["model"].program.graph)


def test_moe_plan_keeps_the_loop_for_what_moe_cannot_express() -> None:
    from hub_export.backends.onnx._moe import MoEPlan, moe_plan

    assert moe_plan(_moe_block().experts) == MoEPlan("swiglu", swiglu_fusion=1)
    assert moe_plan(_moe_block(act="gelu_pytorch_tanh").experts) is None  # GEGLU: CUDA only, unverifiable here
    experts = _moe_block().experts
    experts.has_post_expert_norm = True
    assert moe_plan(experts) is None
    experts = _moe_block().experts
    experts._is_expert_parallel = True  # routing ids past num_experts
    assert moe_plan(experts) is None
    experts = _moe_block().experts
    type(experts)._apply_gate = lambda self, x: x  # a model's own gate (GPT-OSS clamps it)
    assert moe_plan(experts) is None
