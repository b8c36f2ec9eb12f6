"""Workarounds applied while ``torch.onnx.export`` lowers a traced program; each names the upstream bug.

* :func:`promotions_only_where_needed` — torch.onnx's type-promotion pass executes every node again on fake tensors
  (5 s on Qwen2.5-0.5B's decode graph, where it inserted nothing); it runs only where
  :func:`._promotion.promotion_needed` finds a cast to insert.
* :func:`lowered_without_retrace` — torch.onnx runs ``ExportedProgram.run_decompositions`` on every program, a second
  AOT trace of the whole model (15.0 s of a 42.9 s Qwen2.5-0.5B generation export; OpenVINO's frontend did the same,
  openvinotoolkit/openvino#37626, dropped upstream in #38078). A program that writes no tensor and holds only
  operators ONNX's registry translates is lowered as it stands
  (:func:`~hub_export.patches.direct_lowering.direct_program`).
* :func:`views_as_reshapes` — pytorch/pytorch#141107 (also #136543): after the ONNX decompositions, torch
  re-runs the graph on fake tensors to insert type promotions, and the strides it then gets for
  ``scaled_dot_product_attention`` differ from the ones the decomposition saw, so a ``view`` of a transposed
  attention output (T5, and any model doing ``transpose(1, 2).reshape(b, s, -1)``) fails with "Cannot view a tensor
  with shape ... and strides ...". In ONNX both are a ``Reshape``: the views become reshapes before that pass. The
  same hook makes the number of ``sub(number, tensor)`` (``1.0 - mask`` after decomposition) a 0-d tensor: that
  pass cannot re-find an ``aten.sub`` overload for it after promoting an integer tensor (torch 2.13's
  ``find_compatible_op_overload``; ProphetNet's ``1.0 - attention_mask``).
* :func:`translation_table` — microsoft/onnxscript#2654 (issue #2561) switched torchlib's boolean-mask attention from
  ``-inf`` to the dtype's lowest value, which silently undid microsoft/onnxscript#2479: a query row that masks every
  key (left padding) now averages the values instead of returning zeros like ATen's ``_safe_softmax``. Our
  translation runs torchlib's and zeroes those rows (boolean masks, and float masks that are ``-inf`` everywhere).
  The table also translates ``aten._is_all_true`` / ``aten._is_any_true``, which torchlib lacks (no ONNX function
  registered, microsoft/onnxscript torch_lib): ``torch._check_tensor_all(cond)`` (transformers'
  ``torch_compilable_check`` while tracing, e.g. "image tokens match image features") records one; it becomes a
  ``ReduceMin`` / ``ReduceMax`` of the condition (an empty tensor is all-true and not any-true, as in ATen).
  ``aten.squeeze.dim`` / ``.dims`` follow ATen, where squeezing an axis whose size is not 1 does nothing: torchlib
  emits ``Squeeze`` on that axis regardless, which ONNX Runtime refuses when it loads the model ("Dimension of input
  2 must be 1 instead of 3", an RNN-T joint's ``logits.squeeze(2)`` over a decoder length of 3). Our translation
  squeezes only the axes the traced shape says are 1 or does not know (a dynamic dim was traced as not 1: it stays).
  ``aten.index_put`` handles ``None`` indices around one boolean mask (``x[:, mask] = v``) before torchlib's, whose
  boolean-mask path refuses them ("Boolean index_put with multiple indices does not support None indices").
  ``aten.reshape`` becomes a ``Reshape`` with ``allowzero=1``, as torchlib's ``aten.view`` does: torch's sizes are
  literal, while ONNX's default reads a 0 in the shape as "copy the input's size there". Torchlib's ``aten_reshape``
  (onnxscript 0.7, ``function_libs/torch_lib/ops/core.py``) omits it, and :func:`views_as_reshapes` sends every view
  through it: a view to a size-0 axis (a zero-width rotary part, ``k_rot.view(batch, 1, seq, 0)`` of a tiny
  Mistral-Large-4 layer) made ONNX Runtime refuse the run ("The dimension with value zero exceeds the dimension size
  of the input tensor") or copied another size.
  ``aten.erfinv`` / ``prims.erf_inv`` have no ONNX operator and torchlib leaves them unimplemented
  (``aten_erfinv`` / ``prims_erf_inv`` raise ``NotImplementedError``, onnxscript 0.7): Gemma-3n's activation sparsity
  takes ``Normal(0, 1).icdf(sparsity)``. Our translation is M. Giles' single-precision approximation ("Approximating
  the erfinv function", GPU Computing Gems, 2011) refined by two Newton steps on ONNX's ``Erf``; +-1 give +-inf and
  values outside [-1, 1] NaN, as in ATen.
  ``aten.pow.Tensor_Tensor`` of integers: torchlib emits ONNX ``Pow``, which ONNX Runtime computes through doubles and
  saturates at the int64 limits, where ATen's integer power wraps around (two's complement): a rolling hash such as
  BLT's (``prime ** arange(n)`` with 10-digit primes) overflows by design. Our translation raises integers by
  square-and-multiply over the exponent's bits (``Mul`` wraps in ONNX Runtime as in ATen); floats keep torchlib's
  ``Pow``.
  It also translates our custom op ``hub_export::moe`` (traced for ``ort_fusions="cuda"``) into
  ``com.microsoft::MoE`` (:mod:`hub_export.backends.onnx._moe`).
* :func:`single_output_rewrite_rules` — onnxscript 0.7: a rewrite rule whose pattern has several output nodes is
  matched by rebuilding an index of the whole graph for every node tried (``SimplePatternMatcher.match``,
  ``onnxscript/rewriter/_matcher.py``), so it costs nodes x nodes. The optimizer's one such default rule,
  ``SlicesSplit`` (two ``Slice`` halves of a value -> one ``Split``), took 18 of the 49 s of a Qwen2.5-0.5B export
  (6,000 nodes) and fired on none of them; the optimizer runs without it.
* :func:`exact_no_op_rules` — onnxscript 0.7's no-op rules (``rewriter/rules/common/_no_op.py``: ``x + 0``,
  ``x - 0``, ``x * 1``, ``x / 1`` become ``Identity``) match their constant through ``_pattern_ir.Constant``, whose
  default tolerances (``abs_tol=1e-8``, ``rel_tol=1e-5``, ``math.isclose``) take ``x + 1e-8`` for ``x + 0``: an
  RMSNorm's ``rsqrt(mean(x**2) + 1e-8)`` lost its epsilon, and a row of zeros (a left-padded row of a Muse-Glimmer
  layer) became ``rsqrt(0) = inf``, then NaN. The optimizer runs them with exact constants.
* :func:`known_split_folding` — onnxscript 0.7's constant folding of ``SplitToSequence``
  (``optimizer/_constant_folding.py``, ``split_to_sequence``) reads ``split_value.ndim`` when the ``split`` input is a
  0-d tensor of unknown value (a split size computed from a dynamic dim: ProphetNet's n-gram streams), and the
  export fails with "'NoneType' object has no attribute 'ndim'". Such a node has no static output count to fold to;
  inside the block the folding leaves it as it is (what the rule does for any other split it cannot count).
* :func:`register_orphan_constants` — onnxscript 0.7's rewriter (``RewriteRuleSet._apply_to_graph_or_function``)
  stores each new initializer of a rewrite under its name, replacing one of the same name (its "already exists" check
  skips nothing). The Min/Max-to-Clip rules name their bounds ``<input>_min`` / ``<input>_max``, so two clamps of one
  tensor (an audio conformer's) leave the first ``Clip`` reading a constant that is no longer in the graph: ONNX
  Runtime refuses the model ("Node input 'x_min_1' is not a graph input, initializer, or output of a previous
  node"). After optimizing, such constants are registered again, under unique names.
* :func:`unbatch_fused_matmuls` — onnxscript 0.7's ``FusedMatMul`` rules (``fused_matmul_rule_sets``, added in
  microsoft/onnxscript#2331) fold a batch ``Transpose`` (perm ``[1, ..., N-2, 0, N-1]``) of one input into
  ``transBatchA``/``transBatchB`` without checking the other input's rank; ONNX Runtime runs a batch transpose only
  when both inputs have the same rank >= 3 ("Two inputs should have same rank and rank >= 3 if transBatchA or
  transBatchB is true"). A tied output projection (the last token's hidden states, ``[1, batch, hidden]`` after a
  ``Transpose``, times the embedding table read through ``transB``) met it. After the fusions, each such flag becomes
  the ``Transpose`` it replaced again.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from ...errors import PatchTargetMissing
from ...patches import patch_attribute
from ...patches.direct_lowering import direct_program
from ._promotion import promotion_needed

__all__ = [
    "onnx_export_patches",
    "register_orphan_constants",
    "exact_no_op_rules",
    "known_split_folding",
    "single_output_rewrite_rules",
    "translation_table",
    "unbatch_fused_matmuls",
    "views_as_reshapes",
]


@contextlib.contextmanager
def views_as_reshapes() -> Iterator[None]:
    """Turn ``aten.view`` into ``aten.reshape`` right before torch's type-promotion pass (pytorch/pytorch#141107)."""
    import torch
    from torch.onnx._internal.exporter import _fx_passes

    original = getattr(_fx_passes, "insert_type_promotion_nodes", None)

    views = (torch.ops.aten.view.default, torch.ops.aten._unsafe_view.default)
    subtractions = (torch.ops.aten.sub.Tensor, torch.ops.aten.sub.Scalar)

    def insert_type_promotion_nodes(graph_module: Any) -> None:
        for module in graph_module.modules():
            if isinstance(module, torch.fx.GraphModule):
                changed = False
                for node in list(module.graph.nodes):
                    if node.op != "call_function" or not node.args:
                        continue
                    if node.target in views and not _is_complex(node.args[0]):  # torchlib views complex ones
                        node.target = torch.ops.aten.reshape.default
                        changed = True
                    elif node.target == torch.ops.aten.unsqueeze.default and _is_complex(node.args[0]):
                        _unsqueeze_as_real(module.graph, node)
                        changed = True
                    elif node.target in subtractions and isinstance(node.args[0], (int, float)):
                        _number_as_tensor(module.graph, node)
                        changed = True
                if changed:
                    module.recompile()
        if original is not None:  # patch_attribute below refuses a missing target (PatchTargetMissing)
            original(graph_module)

    with patch_attribute(
        _fx_passes, "insert_type_promotion_nodes", insert_type_promotion_nodes, reason="pytorch/pytorch#141107"
    ):
        yield


def _is_complex(node: Any) -> bool:
    value: Any = getattr(node, "meta", {}).get("val")
    return hasattr(value, "is_complex") and bool(value.is_complex())


def _number_as_tensor(graph: Any, node: Any) -> None:
    """Make the number of ``sub(number, tensor)`` (what ``1.0 - mask`` decomposes to: ``aten.rsub`` has no torchlib
    function) a 0-d tensor of the result's dtype. Torch's type-promotion pass re-finds the overload of a node whose
    tensor it promoted, and no ``aten.sub`` overload takes a number first: an integer mask (ProphetNet's
    ``1.0 - attention_mask``) failed with "Cannot find a compatible OpOverload for aten.sub" (torch 2.13,
    ``torch/onnx/_internal/fx/passes/type_promotion.py``, ``find_compatible_op_overload``). A 0-d tensor of the
    result's dtype promotes like the number, so the values are the same."""
    import torch

    value = node.meta["val"]
    mode = getattr(value, "fake_mode", None)
    with graph.inserting_before(node), mode if mode is not None else contextlib.nullcontext():
        number = graph.call_function(torch.ops.aten.scalar_tensor.default, (node.args[0],), {"dtype": value.dtype})
        number.meta["val"] = torch.ops.aten.scalar_tensor.default(node.args[0], dtype=value.dtype)
    node.target = torch.ops.aten.sub.Tensor
    node.args = (number, *node.args[1:])


def _unsqueeze_as_real(graph: Any, node: Any) -> None:
    """Replace ``unsqueeze(z, d)`` of a complex ``z`` by ``view_as_complex(unsqueeze(view_as_real(z), d))``: torchlib
    has no complex ``unsqueeze`` ("No decompositions registered for the complex-valued input": complex rotary
    embeddings, DeepSeek-V2's ``freqs_cis.unsqueeze(1)``), and complex tensors are real ones with a last axis of 2
    in its ONNX graphs, so the axis is counted from the front."""
    import torch

    aten = torch.ops.aten
    source, dim = node.args[0], node.args[1]
    value = source.meta["val"]
    dim = dim if dim >= 0 else dim + value.dim() + 1
    mode = getattr(value, "fake_mode", None)
    with graph.inserting_before(node), mode if mode is not None else contextlib.nullcontext():
        real = graph.call_function(aten.view_as_real.default, (source,))
        real.meta["val"] = aten.view_as_real.default(value)
        widened = graph.call_function(aten.unsqueeze.default, (real, dim))
        widened.meta["val"] = aten.unsqueeze.default(real.meta["val"], dim)
        back = graph.call_function(aten.view_as_complex.default, (widened,))
        back.meta.update(node.meta)
    node.replace_all_uses_with(back)
    graph.erase_node(node)


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


def _reduce_bool(condition: Any, reduce: str) -> Any:
    """A 0-d boolean: ``reduce`` (ReduceMin: all, ReduceMax: any) of ``condition`` as 0/1 integers."""
    import onnx_ir as ir
    from onnxscript.onnx_opset import opset18

    op: Any = opset18
    as_int = op.Cast(condition, to=ir.DataType.INT32)
    # ONNX reduces an empty tensor to the type's largest (Min) or smallest (Max) value: True for all, False for any
    return op.Cast(getattr(op, reduce)(as_int, keepdims=0), to=ir.DataType.BOOL)


def _is_all_true(condition: Any) -> Any:
    """``aten._is_all_true``: a 0-d boolean, True when every element is nonzero."""
    return _reduce_bool(condition, "ReduceMin")


def _is_any_true(condition: Any) -> Any:
    """``aten._is_any_true``: a 0-d boolean, True when some element is nonzero."""
    return _reduce_bool(condition, "ReduceMax")


def _squeeze_dims(self: Any, dims: Any) -> Any:
    """``aten.squeeze.dims``: squeeze the axes of ``dims`` whose traced size is 1; the others stay (as in ATen)."""
    from onnxscript.onnx_opset import opset18

    op: Any = opset18
    shape = self.shape
    if shape is None:  # rank unknown: ONNX's Squeeze, as torchlib does
        return op.Squeeze(self, op.Constant(value_ints=list(dims)))
    rank = len(shape)
    if rank == 0:
        return op.Identity(self)
    axes = sorted({d % rank for d in dims if _may_be_one(shape[d % rank])})
    return op.Squeeze(self, op.Constant(value_ints=axes)) if axes else op.Identity(self)


def _may_be_one(size: Any) -> bool:
    """A traced size of 1, or an unknown one (squeezed as torchlib does); a named dynamic dim was traced as not 1."""
    if isinstance(size, int):
        return size == 1
    return getattr(size, "value", None) is None


def _squeeze_dim(self: Any, dim: int) -> Any:
    """``aten.squeeze.dim``: see :func:`_squeeze_dims`."""
    return _squeeze_dims(self, [dim])


def _index_put(self: Any, indices: Any, values: Any, accumulate: bool = False) -> Any:
    """``aten.index_put``: torchlib's, with ``None`` indices around one boolean mask handled as ATen does (a full
    slice): trailing ones dropped, leading ones moved behind the masked axis (``x[:, mask] = v``) by transposing
    the tensor and the values there and back. Torchlib's boolean-mask path refuses any ``None`` ("Boolean
    index_put with multiple indices does not support None indices", microsoft/onnxscript torch_lib)."""
    import onnx_ir as ir
    from onnxscript.function_libs.torch_lib.ops.core import aten_index_put
    from onnxscript.onnx_opset import opset18

    op: Any = opset18
    kept = list(indices)
    while len(kept) > 1 and kept[-1] is None:
        kept.pop()
    lead = len(kept) - 1
    mask = kept[-1]
    if lead == 0 or mask is None or mask.dtype != ir.DataType.BOOL or any(i is not None for i in kept[:-1]):
        return aten_index_put(self, kept, values, accumulate)
    rank = len(self.shape)
    axes = len(mask.shape)  # the masked axes follow the leading slices
    perm = list(range(lead, lead + axes)) + list(range(lead)) + list(range(lead + axes, rank))
    inverse = [perm.index(axis) for axis in range(rank)]
    selected = rank - axes + 1  # the rank of x[:, mask]: leading axes, the selected elements, trailing axes
    if len(values.shape) > rank - lead - axes:  # values reach the leading axes: bring them to selection order
        dims = list(values.shape)
        if len(dims) < selected:
            values = op.Unsqueeze(values, op.Constant(value_ints=list(range(selected - len(dims)))))
            dims = [1] * (selected - len(dims)) + dims
        order = [lead] + list(range(lead)) + list(range(lead + 1, selected))
        values = op.Transpose(values, perm=order)
        values.shape = ir.Shape([dims[axis] for axis in order])  # torchlib reads the ranks
    moved = op.Transpose(self, perm=perm)
    moved.shape = ir.Shape([self.shape[axis] for axis in perm])
    return op.Transpose(aten_index_put(moved, [mask], values, accumulate), perm=inverse)


def _reshape(self: Any, shape: Any) -> Any:
    """``aten.reshape``: ONNX ``Reshape`` with ``allowzero=1`` (a 0 in torch's shape is a size of 0)."""
    from onnxscript.function_libs.torch_lib.ops import common as common_ops
    from onnxscript.onnx_opset import opset18

    op: Any = opset18
    return op.Reshape(self, common_ops.merge_dims(shape), allowzero=True)


#: M. Giles' single-precision erfinv polynomials in ``w = -log(1 - x^2)``, for ``w < 5`` (in ``w - 2.5``) and beyond
#: (in ``sqrt(w) - 3``), highest degree first
_ERFINV_CENTRAL = (
    2.81022636e-08, 3.43273939e-07, -3.5233877e-06, -4.39150654e-06, 0.00021858087,
    -0.00125372503, -0.00417768164, 0.246640727, 1.50140941,
)  # fmt: skip
_ERFINV_TAIL = (
    -0.000200214257, 0.000100950558, 0.00134934322, -0.00367342844, 0.00573950773,
    -0.0076224613, 0.00943887047, 1.00167406, 2.83297682,
)  # fmt: skip


def _erfinv(self: Any) -> Any:
    """``aten.erfinv`` / ``prims.erf_inv``: Giles' approximation, then two Newton steps on ``Erf`` (float32)."""
    from onnxscript.onnx_opset import opset18

    op: Any = opset18

    def const(value: float) -> Any:
        return op.Constant(value_float=value)

    x = op.Cast(self, to=1)  # float32, as the polynomials
    w = op.Neg(op.Log(op.Mul(op.Sub(const(1.0), x), op.Add(const(1.0), x))))

    def horner(coefficients: tuple[float, ...], t: Any) -> Any:
        p = const(coefficients[0])
        for c in coefficients[1:]:
            p = op.Add(const(c), op.Mul(p, t))
        return p

    central = horner(_ERFINV_CENTRAL, op.Sub(w, const(2.5)))
    tail = horner(_ERFINV_TAIL, op.Sub(op.Sqrt(op.Max(w, const(5.0))), const(3.0)))
    y = op.Mul(op.Where(op.Less(w, const(5.0)), central, tail), x)
    for _ in range(2):  # Newton: y -= (erf(y) - x) / (2 / sqrt(pi) * exp(-y^2)), where the slope is not 0
        slope = op.Mul(const(1.1283791670955126), op.Exp(op.Neg(op.Mul(y, y))))
        step = op.Div(op.Sub(op.Erf(y), x), slope)
        y = op.Where(op.Greater(slope, const(0.0)), op.Sub(y, step), y)
    edge = op.Equal(op.Abs(x), const(1.0))
    y = op.Where(edge, op.Mul(x, const(float("inf"))), y)
    return op.CastLike(y, self)


def _pow(self: Any, exponent: Any) -> Any:
    """``aten.pow.Tensor_Tensor``: integers by square-and-multiply (wrapping as ATen does), else torchlib's."""
    import onnx_ir as ir
    from onnxscript.function_libs.torch_lib.ops.core import aten_pow
    from onnxscript.onnx_opset import opset18

    integers = (ir.DataType.INT64, ir.DataType.INT32, ir.DataType.INT16, ir.DataType.INT8, ir.DataType.UINT8)
    if self.dtype not in integers or exponent.dtype not in integers:
        return aten_pow(self, exponent)
    op: Any = opset18
    base = op.Mul(self, op.CastLike(op.Constant(value_int=1), self))  # broadcast below with the exponent
    power = op.Cast(exponent, to=ir.DataType.INT64)
    one = op.CastLike(op.Constant(value_int=1), self)
    result = op.Expand(one, op.Shape(op.Add(op.Cast(base, to=ir.DataType.INT64), power)))
    two = op.Constant(value_int=2)
    for bit in range(int(exponent.dtype.itemsize) * 8 - 1):  # a non-negative exponent (ATen refuses negative ones)
        taken = op.Equal(op.Mod(op.Div(power, op.Constant(value_int=2**bit)), two), op.Constant(value_int=1))
        result = op.Where(taken, op.Mul(result, base), result)
        base = op.Mul(base, base)
    return result


def translation_table() -> dict[Any, Any]:
    """``custom_translation_table`` for ``torch.onnx.export`` (see this module's docstring)."""
    import torch

    from ._moe import moe_op, translate_moe

    return {
        torch.ops.aten.scaled_dot_product_attention.default: _safe_sdpa,
        torch.ops.aten._is_all_true.default: _is_all_true,
        torch.ops.aten._is_any_true.default: _is_any_true,
        torch.ops.aten.index_put.default: _index_put,
        torch.ops.aten.reshape.default: _reshape,
        torch.ops.aten.erfinv.default: _erfinv,
        torch.ops.aten.pow.Tensor_Tensor: _pow,
        torch.ops.prims.erf_inv.default: _erfinv,
        torch.ops.aten.squeeze.dim: _squeeze_dim,
        torch.ops.aten.squeeze.dims: _squeeze_dims,
        moe_op(): translate_moe,
    }


def register_orphan_constants(model: Any) -> int:
    """Register the constants nodes read that no graph holds (onnxscript's rewriter dropped them; see above).

    Returns:
        How many were registered.
    """
    import onnx_ir as ir

    graph = model.graph
    registered = 0
    for node in ir.traversal.RecursiveGraphIterator(graph):
        for value in node.inputs:
            if value is None or value.const_value is None or value.producer() is not None:
                continue
            if value.is_graph_input() or value.is_initializer():
                continue
            base, index = value.name or "constant", 0
            name = base
            while name in graph.initializers:  # a subgraph's node may read the main graph's initializers
                index += 1
                name = f"{base}_{index}"
            value.name = name
            graph.register_initializer(value)
            registered += 1
    return registered


def unbatch_fused_matmuls(model: Any) -> int:
    """Turn each ``transBatchA``/``transBatchB`` of a ``FusedMatMul`` whose inputs differ in rank (or are not known to
    share a rank >= 3) back into an explicit ``Transpose`` of that input (see this module's docstring).

    Returns:
        How many flags were undone.
    """
    import onnx_ir as ir

    undone = 0
    for node in list(model.graph):
        if node.op_type != "FusedMatMul" or node.domain != "com.microsoft" or len(node.inputs) != 2:
            continue
        ranks = [None if v is None or v.shape is None else len(v.shape) for v in node.inputs]
        if ranks[0] is not None and ranks[0] == ranks[1] and ranks[0] >= 3:
            continue
        for index, flag in enumerate(("transBatchA", "transBatchB")):
            attribute = node.attributes.get(flag)
            value, rank = node.inputs[index], ranks[index]
            if attribute is None or attribute.as_int() == 0 or value is None or rank is None:
                continue
            perm = [*range(1, rank - 1), 0, rank - 1]
            transpose = ir.node("Transpose", inputs=[value], attributes={"perm": perm}, name=f"{node.name}_{flag}")
            model.graph.insert_before(node, transpose)
            node.replace_input_with(index, transpose.outputs[0])
            node.attributes[flag] = ir.AttrInt64(flag, 0)
            undone += 1
    return undone


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
def exact_no_op_rules() -> Iterator[None]:
    """onnxscript's no-op rules (``x + 0``, ``x * 1``, ...) matching only an exact 0 or 1 (see this module's
    docstring): their constant patterns' tolerances are 0 inside the block."""
    from onnxscript.rewriter import _pattern_ir
    from onnxscript.rewriter.rules.common import _no_op

    reason = "onnxscript 0.7's no-op rules taking x + 1e-8 for x + 0 (_pattern_ir.Constant's default tolerances)"
    constants = [
        value
        for rule in _no_op.rules.rules
        for node in getattr(rule._target_pattern, "_nodes", ())
        for value in node.inputs
        if isinstance(value, _pattern_ir.Constant)
    ]
    if not constants:
        raise PatchTargetMissing(f"onnxscript's no-op rules have no constant patterns; the workaround for {reason}")
    with contextlib.ExitStack() as stack:
        for constant in constants:
            stack.enter_context(patch_attribute(constant, "_abs_tol", 0.0, reason=reason))
            stack.enter_context(patch_attribute(constant, "_rel_tol", 0.0, reason=reason))
        yield


@contextlib.contextmanager
def known_split_folding() -> Iterator[None]:
    """onnxscript's ``SplitToSequence`` folding, applied only where the ``split`` input's value or 1-D static shape
    is known (see this module's docstring)."""
    from onnxscript.optimizer import _constant_folding as folding

    reason = "onnxscript 0.7's SplitToSequence folding reading the value of a split it does not know"
    evaluators = folding.registry.op_evaluators.get(("", "SplitToSequence"), [])
    if not evaluators:
        raise PatchTargetMissing(f"onnxscript has no SplitToSequence folding; the workaround for {reason}")

    def known(function: Any) -> Any:
        def split_to_sequence(node: Any, op: Any, state: Any) -> Any:
            split = node.inputs[1] if len(node.inputs) > 1 else None
            shape = getattr(split, "shape", None)
            one_d = shape is not None and shape.is_static() and len(shape) == 1
            if split is not None and not one_d and folding._get_numpy_value(split) is None:
                return None  # nothing to count the outputs by: left as it is
            return function(node, op, state)

        return split_to_sequence

    with contextlib.ExitStack() as stack:
        for evaluator in evaluators:
            stack.enter_context(patch_attribute(evaluator, "function", known(evaluator.function), reason=reason))
        yield


@contextlib.contextmanager
def lowered_without_retrace(direct: list[bool]) -> Iterator[None]:
    """Let ``torch.onnx.export`` lower the traced program itself, instead of ``run_decompositions``'s re-trace of it,
    where :func:`~hub_export.patches.direct_lowering.direct_program` allows (nothing written in place, every
    operator one ONNX's registry translates, our :func:`translation_table` included). ``direct`` gets a True for
    each program lowered so, for the caller to lower again through the re-trace if this lowering fails."""
    from torch.onnx._internal.exporter import _decomp, _fx_passes

    original = _fx_passes.decompose_with_registry

    def decompose(program: Any, registry: Any) -> Any:
        translated = set(_decomp.get_onnx_implemented_overloads(registry))
        lowered = direct_program(program, translated.__contains__)
        if lowered is None:
            return original(program, registry)
        direct.append(True)
        return lowered

    with patch_attribute(
        _fx_passes,
        "decompose_with_registry",
        decompose,
        reason="the re-trace of run_decompositions before every ONNX lowering (openvinotoolkit/openvino#37626 for the same in OpenVINO)",
    ):
        yield


@contextlib.contextmanager
def promotions_only_where_needed() -> Iterator[None]:
    """Run torch.onnx's ``insert_type_promotion_nodes`` only on a graph where it would insert a cast
    (:func:`._promotion.promotion_needed`); elsewhere it would execute every node again and change nothing."""
    from torch.onnx._internal.exporter import _fx_passes

    original = _fx_passes.insert_type_promotion_nodes

    def insert(graph_module: Any) -> None:
        if promotion_needed(graph_module):
            original(graph_module)

    with patch_attribute(
        _fx_passes,
        "insert_type_promotion_nodes",
        insert,
        reason="torch.onnx's type promotion pass re-running every node of a graph it does not change",
    ):
        yield


@contextlib.contextmanager
def onnx_export_patches(direct: list[bool] | None = None) -> Iterator[None]:
    """Every patch needed while lowering to ONNX; with a ``direct`` list, also :func:`lowered_without_retrace`."""
    with contextlib.ExitStack() as stack:
        stack.enter_context(promotions_only_where_needed())  # inside views_as_reshapes: its rewrites always run
        stack.enter_context(views_as_reshapes())
        if direct is not None:
            stack.enter_context(lowered_without_retrace(direct))
        yield
