"""Mixture-of-experts layers as ONNX Runtime's ``com.microsoft::MoE`` (``OnnxConfig(ort_fusions="cuda")``).

Three pieces, used only when an ONNX export is fused for cuda:

* :func:`moe_op` — the torch custom op ``hub_export::moe`` with ``com.microsoft::MoE``'s contract: ``input``
  ``[tokens, hidden]``, ``router_probs`` ``[tokens, experts]``, ``fc1_experts_weights`` ``[experts, fusion * inter,
  hidden]``, optional ``fc1_experts_bias``, ``fc2_experts_weights`` ``[experts, hidden, inter]``, optional
  ``fc2_experts_bias``; attributes ``k``, ``activation_type``, ``swiglu_fusion``, ``activation_alpha``,
  ``activation_beta``, ``normalize_routing_weights``. Its eager body :func:`reference_moe` is ORT's semantics in
  PyTorch (softmax over ``router_probs``, top-``k``, optional renormalisation, ``fc1`` -> activation -> ``fc2``,
  weighted sum), computed in float32.
* :func:`fused_experts_forward` — the forward that a transformers ``@use_experts_implementation`` experts module
  runs while tracing (:func:`hub_export.patches.tracing.experts_as_standard_ops`): one ``hub_export::moe`` call.
* :func:`translate_moe` — its ONNX translation (``custom_translation_table``), one ``com.microsoft::MoE`` node;
  :func:`fold_moe_weights` then stores the node's weights in its layout (``fuse_for_ort``).

**Routing.** The model's router has already chosen the experts (``top_k_index``) and their weights
(``top_k_weights``) however it likes (softmax, sigmoid, grouped, biased selection...), while ``MoE`` routes by itself
with a softmax over ``router_probs``. So ``router_probs`` is written to make that softmax return the model's choice:
a large negative finite value everywhere, and ``log(w_i / S)`` (``S = sum(w)``) at the chosen experts. The top-``k``
of the softmax are then exactly the chosen experts, with weights ``w_i / S`` (``normalize_routing_weights=0``), and
the node's output multiplied by ``S`` is ``sum_i w_i * expert_i(x)``, what the model computes. The logs are clamped at
-80 (a weight below ``e**-80 * S`` becomes ``e**-80 * S``) and the others set to -1e4 (finite in float16 too).
Routing weights must be non-negative (true of every softmax or sigmoid router); in float16/bfloat16 the routing
logits carry that dtype's rounding.

**Layout.** Gated experts (``gate_up_proj`` = ``[gate | up]``, ``act_fn(gate) * up`` with SiLU) become
``activation_type="swiglu"`` with ``activation_alpha=1``, ``activation_beta=0`` (``G * sigmoid(G) * L``) and
``swiglu_fusion=1``: the rows of gate and up interleaved (``g0, l0, g1, l1, ...``), the one layout ORT's CPU kernel
runs (its CUDA kernel takes both), the permutation done on the constant weights. Transposed weights
(``is_transposed``) are transposed back. Experts without a gate take ``relu``, ``silu`` or ``gelu`` — ORT's ``gelu``
is the tanh approximation on both CPU and CUDA, so only tanh GELUs map to it. Anything else keeps the per-expert
loop of standard ops: a custom ``_apply_gate`` (GPT-OSS's clamped gate), a gated activation other than SiLU, exact
(erf) GELU, ``post_expert_norm``, expert-parallel routing ids past the expert count.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ...patches.tracing import experts_per_expert_loop

__all__ = [
    "MoEPlan",
    "fold_moe_weights",
    "fused_experts_forward",
    "moe_op",
    "moe_plan",
    "reference_moe",
    "translate_moe",
]

_SCHEMA = (
    "(Tensor input, Tensor router_probs, Tensor fc1_experts_weights, Tensor? fc1_experts_bias, "
    "Tensor fc2_experts_weights, Tensor? fc2_experts_bias, int k, str activation_type, int swiglu_fusion, "
    "float activation_alpha, float activation_beta, int normalize_routing_weights) -> Tensor"
)
#: ``router_probs`` of the experts not chosen, and the floor of the chosen ones' log-weights.
_NOT_CHOSEN, _LOG_FLOOR = -1e4, -80.0


@dataclass(frozen=True)
class MoEPlan:
    """How one experts module maps to ``MoE``: its activation and, when gated, the ``swiglu_fusion`` layout."""

    activation_type: str
    swiglu_fusion: int = 0


@functools.cache
def moe_op() -> Any:
    """Register ``hub_export::moe`` (once per process) and return its overload ``torch.ops.hub_export.moe.default``."""
    import torch

    op = torch.library.custom_op("hub_export::moe", reference_moe, mutates_args=(), schema=_SCHEMA)

    @op.register_fake
    def _fake(input: Any, *args: Any) -> Any:
        return torch.empty_like(input)

    return torch.ops.hub_export.moe.default


def reference_moe(
    input: Any,
    router_probs: Any,
    fc1_experts_weights: Any,
    fc1_experts_bias: Any,
    fc2_experts_weights: Any,
    fc2_experts_bias: Any,
    k: int,
    activation_type: str,
    swiglu_fusion: int,
    activation_alpha: float,
    activation_beta: float,
    normalize_routing_weights: int,
) -> Any:
    """``com.microsoft::MoE`` in PyTorch (float32 inside; the separate ``fc3`` of ``swiglu_fusion=0`` is not taken).

    Raises:
        ValueError: An activation or layout the op does not define here.
    """
    import torch
    import torch.nn.functional as F

    if activation_type == "swiglu" and swiglu_fusion not in (1, 2):
        raise ValueError(f"swiglu_fusion={swiglu_fusion}: hub_export::moe takes fused gate/up weights (1 or 2).")
    hidden = input.shape[-1]
    x = input.reshape(-1, hidden).float()
    probs = torch.softmax(router_probs.reshape(x.shape[0], -1).float(), dim=-1)
    scale, chosen = probs.topk(k, dim=-1)
    if normalize_routing_weights:
        scale = scale / scale.sum(dim=-1, keepdim=True)
    output = torch.zeros_like(x)
    for expert in range(fc1_experts_weights.shape[0]):
        token, slot = torch.where(chosen == expert)
        if token.numel() == 0:
            continue
        bias = None if fc1_experts_bias is None else fc1_experts_bias[expert].float()
        states = F.linear(x[token], fc1_experts_weights[expert].float(), bias)
        states = _activation(states, activation_type, swiglu_fusion, activation_alpha, activation_beta)
        bias = None if fc2_experts_bias is None else fc2_experts_bias[expert].float()
        states = F.linear(states, fc2_experts_weights[expert].float(), bias)
        output.index_add_(0, token, states * scale[token, slot, None])
    return output.to(input.dtype).reshape(input.shape)


def _activation(states: Any, activation_type: str, fusion: int, alpha: float, beta: float) -> Any:
    import torch
    import torch.nn.functional as F

    if activation_type == "swiglu":
        gate, up = (states[:, 0::2], states[:, 1::2]) if fusion == 1 else states.chunk(2, dim=-1)
        return gate * torch.sigmoid(alpha * gate) * (up + beta)
    activations: dict[str, Callable[[Any], Any]] = {
        "relu": F.relu,
        "silu": F.silu,
        "gelu": functools.partial(F.gelu, approximate="tanh"),
        "identity": lambda t: t,
    }
    if activation_type not in activations:
        raise ValueError(f"activation_type={activation_type!r}: use one of {['swiglu', *activations]}.")
    return activations[activation_type](states)


def _activation_type(act_fn: Any) -> str | None:
    """``MoE``'s name for ``act_fn``, or None when ``MoE`` has no activation with exactly its maths."""
    import torch
    from transformers import activations

    if isinstance(act_fn, (torch.nn.SiLU, activations.SiLUActivation)):
        return "silu"
    if isinstance(act_fn, torch.nn.ReLU):
        return "relu"
    tanh_gelus = (activations.GELUTanh, activations.NewGELUActivation, activations.FastGELUActivation)
    if isinstance(act_fn, tanh_gelus) or (isinstance(act_fn, torch.nn.GELU) and act_fn.approximate == "tanh"):
        return "gelu"
    return None


def moe_plan(module: Any) -> MoEPlan | None:
    """How ``module`` (a ``@use_experts_implementation`` experts module) maps to ``MoE``, or None if it does not."""
    from transformers.integrations import moe

    if not hasattr(module, "has_gate"):  # an experts class with a forward of its own (DBRX's): not MoE's layout
        return None
    if getattr(module, "has_post_expert_norm", False) or getattr(module, "_is_expert_parallel", False):
        return None
    activation = _activation_type(getattr(module, "act_fn", None))
    if not module.has_gate:
        return None if activation is None or not hasattr(module, "up_proj") else MoEPlan(activation)
    if getattr(type(module), "_apply_gate", None) is not getattr(moe, "_default_apply_gate", None):
        return None  # a model's own gate (GPT-OSS clamps it): not MoE's SwiGLU
    return MoEPlan("swiglu", swiglu_fusion=1) if activation == "silu" else None


def _interleaved(tensor: Any) -> Any:
    """``[..., gate | up, last]`` rows (or a bias's last axis) as ``g0, l0, g1, l1, ...`` (``swiglu_fusion=1``)."""
    if tensor.dim() == 2:  # a bias [experts, 2 * inter]
        experts, rows = tensor.shape
        return tensor.reshape(experts, 2, rows // 2).transpose(1, 2).reshape(experts, rows)
    experts, rows, cols = tensor.shape
    return tensor.reshape(experts, 2, rows // 2, cols).transpose(1, 2).reshape(experts, rows, cols)


def _weights(module: Any, plan: MoEPlan) -> tuple[Any, Any, Any, Any]:
    """``(fc1, fc1_bias, fc2, fc2_bias)`` in ``MoE``'s layout: ``[experts, out, in]``, gate/up interleaved."""
    fc1 = module.gate_up_proj if module.has_gate else module.up_proj
    fc2 = module.down_proj
    if module.is_transposed:  # stored [experts, in, out]
        fc1, fc2 = fc1.transpose(1, 2), fc2.transpose(1, 2)
    fc1_bias = fc2_bias = None
    if module.has_bias:
        fc1_bias = module.gate_up_proj_bias if module.has_gate else module.up_proj_bias
        fc2_bias = module.down_proj_bias
    if plan.swiglu_fusion == 1:
        fc1 = _interleaved(fc1)
        fc1_bias = None if fc1_bias is None else _interleaved(fc1_bias)
    return fc1, fc1_bias, fc2, fc2_bias


def fused_experts_forward(module: Any, plan: MoEPlan, hidden_states: Any, top_k_index: Any, top_k_weights: Any) -> Any:
    """An experts forward made of one ``hub_export::moe`` call, routed as the model decided (module docstring)."""
    import torch

    k = top_k_index.shape[-1]
    fc1, fc1_bias, fc2, fc2_bias = _weights(module, plan)
    if not isinstance(k, int) or fc1.dtype != hidden_states.dtype:
        return experts_per_expert_loop(module, hidden_states, top_k_index, top_k_weights)
    dtype = hidden_states.dtype
    weights = top_k_weights.float()
    total = weights.sum(dim=-1, keepdim=True)
    share = weights / total.clamp_min(torch.finfo(torch.float32).tiny)
    logits = share.clamp_min(torch.finfo(torch.float32).tiny).log().clamp_min(_LOG_FLOOR)
    router = hidden_states.new_full((hidden_states.shape[0], fc1.shape[0]), _NOT_CHOSEN)
    router = router.scatter(1, top_k_index, logits.to(dtype))
    output = moe_op()(
        hidden_states, router, fc1, fc1_bias, fc2, fc2_bias, k, plan.activation_type, plan.swiglu_fusion, 1.0, 0.0, 0
    )
    return output * total.to(dtype)


def translate_moe(
    input: Any,
    router_probs: Any,
    fc1_experts_weights: Any,
    fc1_experts_bias: Any,
    fc2_experts_weights: Any,
    fc2_experts_bias: Any,
    k: int,
    activation_type: str,
    swiglu_fusion: int,
    activation_alpha: float,
    activation_beta: float,
    normalize_routing_weights: int,
) -> Any:
    """``hub_export::moe`` -> one ``com.microsoft::MoE`` node (a ``custom_translation_table`` entry)."""
    from onnxscript import values

    moe = values.Op(values.Opset("com.microsoft", 1), "MoE", _onnx_schema())
    inputs = [input, router_probs, fc1_experts_weights, fc1_experts_bias, fc2_experts_weights, fc2_experts_bias]
    while inputs[-1] is None:
        inputs.pop()
    return moe(
        *inputs,
        k=k,
        activation_type=activation_type,
        swiglu_fusion=swiglu_fusion,
        activation_alpha=activation_alpha,
        activation_beta=activation_beta,
        normalize_routing_weights=normalize_routing_weights,
    )


@functools.cache
def _onnx_schema() -> Any:
    """The part of ``com.microsoft::MoE``'s schema we emit (torch's ONNX tracer needs an ``onnx.defs.OpSchema``;
    ``onnx`` has none for contrib ops and this one is not registered globally)."""
    from onnx import defs

    option = defs.OpSchema.FormalParameterOption
    names = ["input", "router_probs", "fc1_experts_weights", "fc1_experts_bias"]
    names += ["fc2_experts_weights", "fc2_experts_bias"]
    inputs = [
        defs.OpSchema.FormalParameter(n, "T", param_option=option.Optional if "bias" in n else option.Single)
        for n in names
    ]
    ints = ("k", "swiglu_fusion", "normalize_routing_weights")
    kinds = {name: defs.OpSchema.AttrType.INT for name in ints}
    kinds |= {"activation_type": defs.OpSchema.AttrType.STRING}
    kinds |= {name: defs.OpSchema.AttrType.FLOAT for name in ("activation_alpha", "activation_beta")}
    return defs.OpSchema(
        "MoE",
        "com.microsoft",
        1,
        inputs=inputs,
        outputs=[defs.OpSchema.FormalParameter("output", "T")],
        type_constraints=[("T", ["tensor(float)", "tensor(float16)", "tensor(bfloat16)"], "")],
        attributes=[defs.OpSchema.Attribute(name, kind, required=False) for name, kind in kinds.items()],
    )


def fold_moe_weights(model: Any) -> int:
    """Store the weights of ``MoE`` nodes in their final layout: the ``Reshape``/``Transpose`` chain between a weight
    and the node (interleaving, transposition) is computed once here instead of at every session start.

    Returns:
        How many weight inputs were folded.
    """
    import numpy as np
    import onnx_ir as ir

    folded = 0
    for node in model.graph:
        if node.op_type != "MoE" or node.domain != "com.microsoft":
            continue
        for index in range(2, len(node.inputs)):
            chain, value = [], node.inputs[index]
            while value is not None and value.const_value is None and value.producer() is not None:
                producer = value.producer()
                if producer.op_type not in ("Reshape", "Transpose") or producer.domain not in ("", "ai.onnx"):
                    break
                chain.append(producer)
                value = producer.inputs[0]
            if not chain or value is None or value.const_value is None:
                continue
            array = _apply_layout(value.const_value.numpy(), reversed(chain))
            if array is None:
                continue
            weight = ir.Value(name=f"{value.name}.moe_layout", const_value=ir.tensor(np.ascontiguousarray(array)))
            weight.shape, weight.type = ir.Shape(array.shape), ir.TensorType(value.const_value.dtype)
            model.graph.register_initializer(weight)
            node.replace_input_with(index, weight)
            folded += 1
    return folded


def _apply_layout(array: Any, nodes: Any) -> Any:
    """``array`` through constant ``Reshape``/``Transpose`` nodes in order, or None if a shape is not constant."""
    import onnx_ir as ir

    for node in nodes:
        if node.op_type == "Transpose":
            array = array.transpose(node.attributes.get_ints("perm"))
            continue
        shape = ir.convenience.get_const_tensor(node.inputs[1])
        if shape is None or node.attributes.get_int("allowzero", 0):
            return None
        dims = [array.shape[axis] if dim == 0 else dim for axis, dim in enumerate(shape.numpy().tolist())]
        array = array.reshape(dims)
    return array
