"""ONNX Runtime fusions per execution provider (``OnnxConfig(ort_fusions=...)``), built on onnxscript's rewriter.

The exported graph is rewritten into ``com.microsoft`` contrib ops; which ones depends on the provider:

========  ==========================================================================================
provider  attention of a decoder with a KV cache (other attention: ``MultiHeadAttention``)
========  ==========================================================================================
cpu       ``GroupQueryAttention`` with the rotary embedding inside (``do_rotary=1``)
cuda      ``GroupQueryAttention`` with the rotary embedding and Qwen3-style q/k norms inside (``q_norm_weight``)
webgpu    ``GroupQueryAttention`` + a separate ``RotaryEmbedding``
dml       ``MultiHeadAttention`` + a separate ``RotaryEmbedding``
========  ==========================================================================================

cuda also gets mixture-of-experts layers as ``MoE``: decided while tracing, not by a rewrite (the per-expert loop
of the unfused graph is not a pattern worth matching): :mod:`~hub_export.backends.onnx._moe` replaces each
transformers experts layer that ``MoE`` can express by one op, translated into the node, with the model's own routing
passed through ``router_probs``; :func:`fuse_for_ort` stores its weights in ``MoE``'s layout. Other providers keep
the loop (ORT's CPU ``MoE`` kernel runs, but was not clearly faster here: ``benchmarks/ort_moe.py``).

Every provider also gets ``SimplifiedLayerNormalization``, ``SkipSimplifiedLayerNormalization``,
``SkipLayerNormalization``, the GELU fusions (``Gelu``, ``BiasGelu``, ``FastGelu``) and the projections that share
one input (q/k/v, gate/up) packed into one ``MatMul`` (q/k/v then feed ``GroupQueryAttention`` packed).

``GroupQueryAttention`` keeps the graph's semantics exactly, left padding included: the padding mask the graph
built from ``attention_mask`` goes in as ``attention_bias``, rotary positions come from ``position_ids`` (cpu/cuda
also pass ``query_seqlens``: without it ORT's kernel rotates a prompt from its first position id only and refuses a
multi-token step with a past for batch > 1), every row counts the whole cache (``seqlens_k = total - 1``), and query
rows that see no key at all are zeroed afterwards like the unfused graph does. ORT's CPU kernel rotates inside
only for head sizes that are multiples of 16: smaller heads keep a separate ``RotaryEmbedding``.

Qwen3's per-head q/k RMS norms (``SimplifiedLayerNormalization`` over each head, before the rotary) go into
``GroupQueryAttention`` for cuda: ``q_norm_weight``/``k_norm_weight`` and ``qk_norm_epsilon`` (``q_norm_epsilon`` and
``k_norm_epsilon`` when they differ), q/k/v still packed (ORT's CUDA kernel normalizes after unpacking, before it
rotates and appends K to the cache). Only where the op rotates too (the norms come first) and the weights are
constants of the head size; otherwise, and for the other providers, the norms stay nodes before the op. ORT's CPU
kernel refuses these inputs (ORT 1.32, every head size), so :func:`runnable_on` gives ONNX Runtime sessions without
CUDA (and float32 graphs, whose op falls back to CPU) a copy where :func:`expand_qk_norms` writes the schema's
semantics back as standard nodes; the export's parity and our tests run that copy.

Limits: attention counts as a KV-cache decoder's (causal) when the graph returns its key/value; ORT's CUDA
``GroupQueryAttention`` runs float16/bfloat16 only, so a float32 graph fused for cuda runs that op on the CPU
provider; the CUDA kernels of ``GroupQueryAttention`` with q/k norms and of ``MoE`` have not run here (no GPU): the
q/k norms are checked through :func:`expand_qk_norms` on the CPU provider, ``MoE`` on ORT's CPU kernel (same
contract).
"""

from __future__ import annotations

import warnings
from typing import Any

__all__ = ["PROVIDERS", "contrib_ops", "expand_qk_norms", "fuse_for_ort", "runnable_on"]

#: The execution providers ``OnnxConfig.ort_fusions`` accepts.
PROVIDERS = ("cpu", "cuda", "webgpu", "dml")
#: Ops of a graph that is already quantized (the fusions do not match them).
_QUANT_OPS = {
    "QuantizeLinear",
    "DequantizeLinear",
    "DynamicQuantizeLinear",
    "MatMulInteger",
    "MatMulNBits",
    "QLinearMatMul",
}
_MS = "com.microsoft"


def contrib_ops(model: Any) -> list[str]:
    """Sorted ``com.microsoft`` op types in the main graph."""
    return sorted({n.op_type for n in model.graph if n.domain == _MS})


def fuse_for_ort(model: Any, provider: str) -> dict[str, int]:
    """Rewrite ``model`` (an ``onnx_ir.Model``, in place) into the contrib ops ``provider`` runs fastest.

    A graph that is already quantized is left as is, with a warning.

    Returns:
        How many times each fusion applied.
    """
    import onnx_ir.passes.common as common_passes
    from onnxscript.optimizer import optimize
    from onnxscript.rewriter import rewrite
    from onnxscript.rewriter.ort_fusions import _core, cos_sin_cache, mha, rotary_embedding, sdpa
    from onnxscript.rewriter.ort_fusions.attention import fuse_attention
    from onnxscript.rewriter.ort_fusions.bias_gelu import fuse_bias_gelu
    from onnxscript.rewriter.ort_fusions.erfgelu import fuse_erfgelu
    from onnxscript.rewriter.ort_fusions.gelu import fuse_gelu
    from onnxscript.rewriter.ort_fusions.mha_bias import fuse_mha_bias
    from onnxscript.rewriter.ort_fusions.mha_scale import fuse_mha_scale
    from onnxscript.rewriter.ort_fusions.rms_normalization import fuse_rms_normalization
    from onnxscript.rewriter.ort_fusions.sdpa_via_mha import replace_sdpa_by_mha
    from onnxscript.rewriter.ort_fusions.skip_normalization import (
        fuse_skip_layer_normalization,
        fuse_skip_rms_normalization,
    )
    from onnxscript.rewriter.rules.common import _gemm_to_matmul_add

    from ._fusion_rules import (
        canonical_sums,
        cos_sin_cache_rules,
        drop_identity_reshapes,
        gqa_rules,
        pack_projections,
        tanh_gelu_rules,
    )
    from ._moe import fold_moe_weights
    from .patches import unbatch_fused_matmuls

    if provider not in PROVIDERS:
        raise ValueError(f"ort_fusions={provider!r}: use one of {PROVIDERS}.")
    if any(node.op_type in _QUANT_OPS for node in model.graph):
        message = "The graph is already quantized: skipping ort_fusions, which need the float graph."
        warnings.warn(message, UserWarning, stacklevel=3)
        return {}
    rewrite(model, [_gemm_to_matmul_add.gemm_to_matmul_add_rule])
    _pre_optimize(model)
    counts: dict[str, int] = {}

    def fuse(name: str, fuser: Any, **kwargs: Any) -> None:
        counts[name] = fuser.apply_to_model(model) if hasattr(fuser, "apply_to_model") else fuser(model, **kwargs)

    fuse("erf_gelu", fuse_erfgelu)
    fuse("rms_normalization", fuse_rms_normalization)
    fuse("skip_layer_normalization", fuse_skip_layer_normalization)
    fuse("skip_rms_normalization", fuse_skip_rms_normalization)
    fuse("rotary_embedding", rotary_embedding.rotary_embedding_rules)
    fuse("cos_sin_cache", cos_sin_cache_rules())
    fuse("cos_sin_cache_onnxscript", cos_sin_cache.cos_sin_cache_rules)
    common_passes.CommonSubexpressionEliminationPass()(model)
    fuse("partial_rotary_embedding", rotary_embedding.partial_embedding_rules)
    canonical_sums(model)
    fuse("sdpa", sdpa.fuse_sdpa, apply_shape_inference=True)
    counts["identity_reshapes"] = drop_identity_reshapes(model)
    if provider != "dml":  # cpu and cuda rotate inside and take query_seqlens; webgpu rejects query_seqlens
        native = provider in ("cpu", "cuda")
        fuse("gqa", gqa_rules(rotary_inside=native, query_seqlens=native, qk_norm_inside=provider == "cuda"))
    common_passes.CommonSubexpressionEliminationPass()(model)  # one copy of the sizes every layer computes
    fuse("mha1", mha.fuse_mha1)
    fuse("mha2", mha.fuse_mha2)
    fuse("mha_scale", fuse_mha_scale)
    if counts["mha1"] or counts["mha2"]:
        fuse("mha_bias", fuse_mha_bias)
        fuse("attention", fuse_attention)
    fuse("gelu", fuse_gelu)
    fuse("fast_gelu", tanh_gelu_rules())
    fuse("bias_gelu", fuse_bias_gelu)
    fuse("sdpa_via_mha", replace_sdpa_by_mha)
    optimize(model)
    counts["packed_matmul"] = pack_projections(model)
    counts["moe_weights"] = fold_moe_weights(model)  # MoE nodes come from the trace (cuda)
    common_passes.RemoveUnusedNodesPass()(model)  # the weights that were packed
    rewrite(model, _core.ORT_PATTERN_REWRITE_RULES)
    counts["unbatched_matmuls"] = unbatch_fused_matmuls(model)  # onnxscript's batch-transpose rules (patches.py)
    common_passes.LiftConstantsToInitializersPass(lift_all_constants=False, size_limit=1)(model)
    common_passes.RemoveInitializersFromInputsPass()(model)
    common_passes.ShapeInferencePass()(model)
    return {name: count for name, count in counts.items() if count}


def _pre_optimize(model: Any) -> None:
    """What onnxscript's ``ort_fusions._core._pre_optimize`` prepares the fusions with (ONNX shape inference, the
    shape rules), with one run of the optimizer, under the export's own rule patches, instead of two without them.

    The export already ran the optimizer (``exporter._optimize``); upstream's two runs here re-applied every rewrite
    rule, those matching several output nodes included (quadratic in the graph's size, :func:`.patches.
    single_output_rewrite_rules`): 5.8 s of Qwen2.5-0.5B's decode graph, now 1.3 s, with the same fused graph on the
    tiny models the tests fuse. The no-op and split rules keep their fixes (:func:`.patches.exact_no_op_rules`,
    :func:`.patches.known_split_folding`) here too.
    """
    import onnx_ir.passes.common as common_passes
    from onnxscript.optimizer import optimize_ir
    from onnxscript.rewriter.ort_fusions import shape_optimization

    from ._weights import keep_large_weights
    from .patches import exact_no_op_rules, known_split_folding, single_output_rewrite_rules

    common_passes.ShapeInferencePass()(model)
    with single_output_rewrite_rules(), exact_no_op_rules(), known_split_folding():
        shape_optimization.rules.apply_to_model(model)
        optimize_ir(model, should_fold=keep_large_weights)


def _norm_weights(node: Any) -> tuple[Any, Any] | None:
    """``q_norm_weight``/``k_norm_weight`` of a ``GroupQueryAttention`` node that has both (as it must), else None."""
    if node.op_type != "GroupQueryAttention" or node.domain != _MS or len(node.inputs) < 16:
        return None
    weights = node.inputs[14], node.inputs[15]
    return weights if all(w is not None for w in weights) else None


def expand_qk_norms(model: Any) -> int:
    """Rewrite each ``GroupQueryAttention`` with ``q_norm_weight``/``k_norm_weight`` (in place) into what its schema
    documents, for providers without them (ORT's CPU kernel refuses them); returns how many nodes changed.

    The op normalizes every head of Q and K (RMS over the head size, the weight shared by the heads, epsilon from
    ``q_norm_epsilon``/``k_norm_epsilon``, else ``qk_norm_epsilon``, else 1e-6) before any rotary and before K goes
    into the cache: here ``SimplifiedLayerNormalization`` nodes on ``[batch, sequence, heads, head_size]`` views of
    Q and K (split off a packed QKV first) feed the same op without the norm inputs.
    """
    import numpy as np
    import onnx_ir as ir

    def const(values: list[int]) -> ir.Node:
        return ir.node("Constant", [], {"value": ir.tensor(np.array(values, dtype=np.int64))})

    changed = 0
    for node in list(model.graph):
        weights = _norm_weights(node)
        if weights is None:
            continue
        attrs = node.attributes
        heads, kv_heads = attrs.get_int("num_heads"), attrs.get_int("kv_num_heads")
        size = int(weights[0].const_value.shape[0] if weights[0].const_value is not None else weights[0].shape[0])
        default = attrs.get_float("qk_norm_epsilon", 1e-6)
        query, key, value = node.inputs[:3]
        added: list[ir.Node] = []
        if key is None:  # packed [q | k | v] on the last axis
            sizes = const([heads * size, kv_heads * size, kv_heads * size])
            split = ir.node("Split", [query, sizes.outputs[0]], {"axis": -1}, num_outputs=3)
            added += [sizes, split]
            query, key, value = split.outputs
        parts = []
        for x, weight, count, name in ((query, weights[0], heads, "q"), (key, weights[1], kv_heads, "k")):
            by_head, flat = const([0, 0, count, size]), const([0, 0, count * size])
            view = ir.node("Reshape", [x, by_head.outputs[0]])
            epsilon = attrs.get_float(f"{name}_norm_epsilon", default)
            norm = ir.node("SimplifiedLayerNormalization", [view.outputs[0], weight], {"axis": -1, "epsilon": epsilon})
            back = ir.node("Reshape", [norm.outputs[0], flat.outputs[0]])
            added += [by_head, flat, view, norm, back]
            parts.append(back.outputs[0])
        model.graph.insert_before(node, added)
        for index, new in enumerate([*parts, value]):
            node.replace_input_with(index, new)
        node.replace_input_with(14, None)
        node.replace_input_with(15, None)
        for name in ("qk_norm_epsilon", "q_norm_epsilon", "k_norm_epsilon"):
            attrs.pop(name, None)
        changed += 1
    return changed


def runnable_on(model: Any, providers: list[Any]) -> Any:
    """``model``, or a copy (weights shared) with :func:`expand_qk_norms` applied where ``providers`` would run a
    ``GroupQueryAttention`` with norm inputs on a kernel without them: without ``CUDAExecutionProvider``, or in
    float32 (ORT's CUDA op runs float16/bfloat16 only, so a float32 one falls back to the CPU provider)."""
    import onnx_ir as ir

    nodes = [node for node in model.graph if _norm_weights(node) is not None]
    names = {p[0] if isinstance(p, (tuple, list)) else p for p in providers}
    half = (ir.DataType.FLOAT16, ir.DataType.BFLOAT16)
    if not nodes or ("CUDAExecutionProvider" in names and all(n.inputs[0].dtype in half for n in nodes)):
        return model
    copy = model.clone()
    expand_qk_norms(copy)
    return copy
