"""Workarounds applied while ``torch.onnx.export`` lowers a traced program; each names the upstream bug.

* :func:`views_as_reshapes` — pytorch/pytorch#141107 (also #136543): after the ONNX decompositions, torch
  re-runs the graph on fake tensors to insert type promotions, and the strides it then gets for
  ``scaled_dot_product_attention`` differ from the ones the decomposition saw, so a ``view`` of a transposed
  attention output (T5, and any model doing ``transpose(1, 2).reshape(b, s, -1)``) fails with "Cannot view a tensor
  with shape ... and strides ...". In ONNX both are a ``Reshape``: the views become reshapes before that pass.
* :func:`translation_table` — microsoft/onnxscript#2654 (issue #2561) switched torchlib's boolean-mask attention from
  ``-inf`` to the dtype's lowest value, which silently undid microsoft/onnxscript#2479: a query row that masks every
  key (left padding) now averages the values instead of returning zeros like ATen's ``_safe_softmax``. Our
  translation runs torchlib's and zeroes those rows (boolean masks, and float masks that are ``-inf`` everywhere).
  The table also translates our custom op ``hub_export::moe`` (traced for ``ort_fusions="cuda"``) into
  ``com.microsoft::MoE`` (:mod:`hub_export.backends.onnx._moe`).
* :func:`single_output_rewrite_rules` — onnxscript 0.7: a rewrite rule whose pattern has several output nodes is
  matched by rebuilding an index of the whole graph for every node tried (``SimplePatternMatcher.match``,
  ``onnxscript/rewriter/_matcher.py``), so it costs nodes x nodes. The optimizer's one such default rule,
  ``SlicesSplit`` (two ``Slice`` halves of a value -> one ``Split``), took 18 of the 49 s of a Qwen2.5-0.5B export
  (6,000 nodes) and fired on none of them; the optimizer runs without it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from ...patches import patch_attribute

__all__ = ["onnx_export_patches", "single_output_rewrite_rules", "translation_table", "views_as_reshapes"]


@contextlib.contextmanager
def views_as_reshapes() -> Iterator[None]:
    """Turn ``aten.view`` into ``aten.reshape`` right before torch's type-promotion pass (pytorch/pytorch#141107)."""
    import torch
    from torch.onnx._internal.exporter import _fx_passes

    original = getattr(_fx_passes, "insert_type_promotion_nodes", None)

    views = (torch.ops.aten.view.default, torch.ops.aten._unsafe_view.default)

    def insert_type_promotion_nodes(graph_module: Any) -> None:
        for module in graph_module.modules():
            if isinstance(module, torch.fx.GraphModule):
                changed = False
                for node in module.graph.nodes:
                    if node.op == "call_function" and node.target in views:
                        node.target = torch.ops.aten.reshape.default
                        changed = True
                if changed:
                    module.recompile()
        if original is not None:  # patch_attribute below refuses a missing target (PatchTargetMissing)
            original(graph_module)

    with patch_attribute(
        _fx_passes, "insert_type_promotion_nodes", insert_type_promotion_nodes, reason="pytorch/pytorch#141107"
    ):
        yield


def _safe_sdpa(
    query: Any,
    key: Any,
    value: Any,
    attn_mask: Any = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: float | None = None,
    enable_gqa: bool = False,
) -> Any:
    """torchlib's attention, with rows that attend to no key set to zero (microsoft/onnxscript#2654)."""
    import onnx_ir as ir
    from onnxscript.function_libs.torch_lib.ops.nn import aten_scaled_dot_product_attention
    from onnxscript.onnx_opset import opset18

    op: Any = opset18  # symbolic values of the graph being built: onnxscript's tensor-type stubs do not apply
    output = aten_scaled_dot_product_attention(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa)
    if attn_mask is None:
        return output
    zero = op.Constant(value=ir.tensor(0.0, dtype=query.dtype))
    last = op.Constant(value_ints=[-1])
    if attn_mask.dtype == ir.DataType.BOOL:
        attended = op.ReduceMax(op.Cast(attn_mask, to=query.dtype), last, keepdims=1)
        nothing = op.Equal(attended, zero)
    else:
        nothing = op.IsInf(op.ReduceMax(attn_mask, last, keepdims=1), detect_positive=0)
    return op.Where(nothing, zero, output)


def translation_table() -> dict[Any, Any]:
    """``custom_translation_table`` for ``torch.onnx.export`` (see this module's docstring)."""
    import torch

    from ._moe import moe_op, translate_moe

    return {torch.ops.aten.scaled_dot_product_attention.default: _safe_sdpa, moe_op(): translate_moe}


@contextlib.contextmanager
def single_output_rewrite_rules() -> Iterator[None]:
    """onnxscript's default rewrite rules without those matching several output nodes, which cost nodes x nodes
    (see this module's docstring)."""
    from onnxscript import rewriter

    rules = tuple(rule for rule in rewriter._DEFAULT_REWRITE_RULES if _single_output(rule))
    reason = "onnxscript's multi-output pattern matching, quadratic in the graph's nodes (onnxscript 0.7)"
    with patch_attribute(rewriter, "_DEFAULT_REWRITE_RULES", rules, reason=reason):
        yield


def _single_output(rule: Any) -> bool:
    """Whether ``rule``'s pattern has one output node (a rule that does not say counts as one)."""
    target = getattr(rule, "_target_pattern", None)
    return bool(getattr(target, "has_single_output_node", True))


@contextlib.contextmanager
def onnx_export_patches() -> Iterator[None]:
    """Every patch needed while lowering to ONNX."""
    with contextlib.ExitStack() as stack:
        stack.enter_context(views_as_reshapes())
        yield
