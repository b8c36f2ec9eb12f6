"""Our rewrite rules for :mod:`~hub_export.backends.onnx._fusions` (onnxscript's rewriter, patterns of our graphs).

* :func:`cos_sin_cache_rules` — transformers 5 computes the rotary angles as ``position_ids[..., None] * inv_freq``
  (onnxscript's ``CosSinCacheFusion`` matches the older ``MatMul`` form): the ``RotaryEmbedding`` found by
  onnxscript's rule becomes ``com.microsoft.RotaryEmbedding`` with cos/sin caches indexed by position, computed in
  the graph for positions ``0..max(position_ids)`` (the same float32 products as the unfused graph).
* :func:`gqa_rules` — the attention of a decoder with a KV cache (``SDPA`` found by onnxscript, the key/value
  concatenated with the past and repeated for grouped heads, rows without keys zeroed) becomes
  ``com.microsoft.GroupQueryAttention``; see the module docstring of ``_fusions`` for the semantics kept.
  Qwen3's per-head q/k RMS norms go in as ``q_norm_weight``/``k_norm_weight`` when asked (cuda) and the op rotates.
* :func:`tanh_gelu_rules` — GPT-2's ``0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x ** 3)))`` in the operand
  order the exporter writes (onnxscript's rule expects another) becomes ``com.microsoft.FastGelu``.
* :func:`canonical_sums`, :func:`drop_identity_reshapes` — clean-ups that let the patterns match: dims written
  ``sequence + past_sequence`` on one value and ``past_sequence + sequence`` on another, and shape-keeping ``view``
  reshapes between the attention and its output transpose.
* :func:`pack_projections` — ``MatMul`` nodes sharing one input and constant 2D weights become one ``MatMul`` and a
  ``Split``; a ``GroupQueryAttention`` fed the three parts of such a ``Split`` takes the packed tensor instead.
"""

from __future__ import annotations

from typing import Any

from ._weights import ConcatenatedTensor

__all__ = [
    "canonical_sums",
    "cos_sin_cache_rules",
    "drop_identity_reshapes",
    "gqa_rules",
    "pack_projections",
    "tanh_gelu_rules",
]

_MS = "com.microsoft"
_FUSION = "ai.onnxruntime._fusion"


def _int(value: Any) -> int | None:
    from onnxscript.rewriter import _ir_utils

    got = _ir_utils.get_singleton_value(value)
    return int(got) if got is not None else None


def cos_sin_cache_rules() -> Any:
    """The rule set turning transformers 5's rotary (angles by ``Mul``) into ``com.microsoft.RotaryEmbedding``."""
    import onnx_ir as ir
    from onnxscript.rewriter import _ir_utils, pattern

    class CosSinCache(pattern.RewriteRuleClassBase):
        def __init__(self, name: str, scaled: bool) -> None:
            super().__init__(name, remove_nodes=False)  # cos/sin are shared by q and k: unused ones go at the end
            self._scaled = scaled
            self._caches: dict[tuple[int, int, int], tuple[Any, ...]] = {}

        def cleanup(self) -> None:
            self._caches.clear()

        def pattern(self, op, x, position_ids, axes, inv_freq, scaling, interleaved, num_heads):
            angles = op.Mul(op.Cast(op.Unsqueeze(position_ids, axes), to=ir.DataType.FLOAT), inv_freq)
            emb = op.Concat(angles, angles, axis=-1)
            cos, sin = op.Cos(emb), op.Sin(emb)
            if self._scaled:
                cos, sin = op.Mul(cos, scaling), op.Mul(sin, scaling)
            return op.RotaryEmbedding(
                x,
                op.Unsqueeze(cos, [1]),
                op.Unsqueeze(sin, [1]),
                interleaved=interleaved,
                num_heads=num_heads,
                _domain=_FUSION,
            )

        def check(self, context, position_ids, axes, inv_freq, scaling=None, **_):  # type: ignore[override]  # onnxscript passes the pattern's bindings by name
            result = pattern.MatchResult()
            row = _ir_utils.has_rank(position_ids, 1) and _ir_utils.is_1d_value(axes, [0, 2])  # arange(past, total)
            if not row and not (_ir_utils.has_rank(position_ids, 2) and _int(axes) in (2, -1)):
                return result.fail("position_ids is neither [batch, sequence] nor an unsqueezed range.", position_ids)
            freq = _ir_utils.get_numpy_value(inv_freq)
            if freq is None or freq.size == 0 or freq.size != max(freq.shape):
                return result.fail("inv_freq is not a constant vector.", inv_freq)
            if self._scaled and _ir_utils.get_singleton_value(scaling) is None:
                return result.fail("The attention scaling is not a constant scalar.", scaling)
            return result

        def rewrite(self, op, x, position_ids, inv_freq, interleaved, num_heads, scaling=None, **_):
            key = (id(position_ids), id(inv_freq), id(scaling))
            if key not in self._caches:
                top = op.Add(op.ReduceMax(position_ids, keepdims=0), op.Constant(value_int=1))
                positions = op.Cast(
                    op.Range(op.Constant(value_int=0), top, op.Constant(value_int=1)), to=ir.DataType.FLOAT
                )
                column = op.Unsqueeze(positions, op.Constant(value_ints=[1]))
                angles = op.Mul(column, op.Reshape(inv_freq, op.Constant(value_ints=[1, -1])))
                cos, sin = op.Cos(angles), op.Sin(angles)
                if self._scaled:
                    cos, sin = op.Mul(cos, scaling), op.Mul(sin, scaling)
                self._caches[key] = (cos, sin)
                if _ir_utils.has_rank(position_ids, 1):  # the kernel takes [batch, sequence] positions
                    shape = op.Concat(op.Shape(x, start=0, end=1), op.Shape(position_ids), axis=0)
                    self._caches[key] += (op.Expand(op.Unsqueeze(position_ids, op.Constant(value_ints=[0])), shape),)
                else:
                    self._caches[key] += (position_ids,)
            cos, sin, positions = self._caches[key]
            return op.RotaryEmbedding(x, positions, cos, sin, interleaved=interleaved, num_heads=num_heads, _domain=_MS)

    return pattern.RewriteRuleSet(
        [CosSinCache.rule("CosSinCacheMul", scaled=False), CosSinCache.rule("CosSinCacheMulScaled", scaled=True)]
    )


def gqa_rules(*, rotary_inside: bool, query_seqlens: bool, qk_norm_inside: bool = False) -> Any:
    """The rule set turning a KV-cache decoder's attention into ``GroupQueryAttention``.

    Args:
        rotary_inside: Rotate inside the op (``do_rotary=1``, cos/sin caches) where ORT's kernel can (full rotary,
            head size a multiple of 16); otherwise ``RotaryEmbedding`` nodes run before it.
        query_seqlens: Pass ``query_seqlens`` (cpu, cuda): the kernel then takes per-token ``position_ids`` in a
            prompt too and multi-token steps over a past for any batch.
        qk_norm_inside: Per-head q/k RMS norms (``SimplifiedLayerNormalization`` over the head axis, constant
            weights of the head size) go in as ``q_norm_weight``/``k_norm_weight`` with their epsilon (cuda). The
            op normalizes before it rotates, so only where it rotates too; otherwise the norms stay before it.
    """
    import numpy as np
    import onnx_ir as ir
    from onnxscript.rewriter import _ir_utils, pattern

    def heads(op, x_BSD, name):
        x_BSHDh = op.Reshape(x_BSD, pattern.ANY_VALUE, _outputs=[f"{name}_BSHDh"])
        normed = op.SimplifiedLayerNormalization(x_BSHDh, pattern.ANY_VALUE, _outputs=[f"{name}_norm"])
        return op.Transpose(pattern.OrValue([normed, x_BSHDh]), perm=[0, 2, 1, 3], _outputs=[f"{name}_BHSDh"])

    class GQA(pattern.RewriteRuleClassBase):
        def __init__(self, name: str, rotary: bool, heads: str) -> None:
            super().__init__(name, remove_nodes=False)  # shape computations may still read the inner values
            self._has_rotary, self._heads_mode = rotary, heads
            self._heads = self._kv_heads = self._head_size = 0  # set by check() for rewrite()

        def _repeated(self, op, x):  # repeat_kv: grouped key/value heads repeated for the query heads
            if self._heads_mode != "repeat":
                return x
            return op.Reshape(op.Expand(op.Unsqueeze(x, [2]), pattern.ANY_VALUE), pattern.ANY_VALUE)

        def pattern(
            self,
            op,
            query_BSD,
            key_BSDkv,
            value_BSDkv,
            past_key,
            past_value,
            position_ids,
            cos,
            sin,
            mask,
            nothing,
            zero,
            output_shape,
        ):
            query, key = heads(op, query_BSD, "query"), heads(op, key_BSDkv, "key")
            if self._has_rotary:
                query = op.RotaryEmbedding(query, position_ids, cos, sin, _domain=_MS, _outputs=["query_rope"])
                key = op.RotaryEmbedding(key, position_ids, cos, sin, _domain=_MS, _outputs=["key_rope"])
            value = op.Reshape(value_BSDkv, pattern.ANY_VALUE)
            value = op.Transpose(value, perm=[0, 2, 1, 3], _outputs=["value_BHSDh"])
            present_key = pattern.OrValue([op.Concat(past_key, key, axis=-2, _outputs=["key_cache"]), key])
            present_value = pattern.OrValue([op.Concat(past_value, value, axis=-2, _outputs=["value_cache"]), value])
            if self._heads_mode == "grouped":  # one query token: its heads grouped per key head, [B, Hkv, G, Dh]
                query = op.Reshape(query, pattern.ANY_VALUE, _outputs=["query_grouped"])
            keys, values = self._repeated(op, present_key), self._repeated(op, present_value)
            attention = op.SDPA(query, keys, values, mask, key_format="BHSd", _domain=_FUSION, _outputs=["attention"])
            attention = op.Where(nothing, zero, attention)  # our translation table zeroes rows that see no key
            if self._heads_mode == "grouped":
                attention = op.Reshape(attention, pattern.ANY_VALUE)
            output = op.Reshape(op.Transpose(attention, perm=[0, 2, 1, 3]), output_shape, _outputs=["output"])
            return output, present_key, present_value

        def check(  # type: ignore[override]  # onnxscript passes the pattern's bindings by name
            self,
            context,
            query_BSD,
            key_BSDkv,
            value_BSDkv,
            past_key,
            mask,
            attention,
            query_BSHDh,
            key_BSHDh,
            key_BHSDh,
            value_BHSDh,
            key_cache=None,
            value_cache=None,
            query_rope=None,
            key_rope=None,
            nothing=None,
            zero=None,
            query_norm=None,
            key_norm=None,
            query_grouped=None,
            **_,
        ):
            result = pattern.MatchResult()
            present_key = key_cache or key_rope or key_BHSDh
            if not (_returned(present_key) and _returned(value_cache or value_BHSDh)):
                return result.fail("The key/value are not a KV cache returned by the graph.")
            if (query_rope is None) != (key_rope is None) or (query_norm is None) != (key_norm is None):
                return result.fail("Query and key are not transformed alike.")
            for value, rank in ((query_BSD, 3), (key_BSDkv, 3), (value_BSDkv, 3), (mask, 4)):
                if not _ir_utils.has_rank(value, rank):
                    return result.fail(f"Rank of {value.name} is not {rank}.", value)
            if mask.dtype not in (ir.DataType.FLOAT, ir.DataType.FLOAT16, ir.DataType.BFLOAT16) or mask.shape[1] != 1:
                return result.fail("The attention mask is not an additive [batch, 1, query, key] bias.", mask)
            if mask.shape[0] != query_BSD.shape[0] or mask.shape[2] != query_BSD.shape[1]:
                return result.fail("The mask is not [batch, 1, sequence, total] of this query.", mask)
            num_heads, head_size = _ir_utils.get_dim(query_BSHDh, 2), _ir_utils.get_dim(query_BSHDh, 3)
            kv_heads = _ir_utils.get_dim(key_BSHDh, 2)
            if not (isinstance(num_heads, int) and isinstance(kv_heads, int) and isinstance(head_size, int)):
                return result.fail("Unknown or inconsistent head counts.", query_BSHDh)
            if num_heads % kv_heads:
                return result.fail("Unknown or inconsistent head counts.", query_BSHDh)
            if (num_heads != kv_heads) != (self._heads_mode != "plain"):
                return result.fail("Key/value heads are not repeated (or grouped) for the query heads.", query_BSHDh)
            grouped = [kv_heads, num_heads // kv_heads, head_size]
            if self._heads_mode == "grouped" and (
                _ir_utils.get_dim(query_BSHDh, 1) != 1 or list(query_grouped.shape or [])[1:] != grouped
            ):
                return result.fail(
                    "The query is not one token grouped as [batch, kv_heads, group, head].", query_grouped
                )
            if _int(zero) != 0 or not _ir_utils.has_rank(nothing, 4) or nothing.shape[1] != 1:
                return result.fail("The output is not zeroed by a [batch, 1, query, 1] condition.", nothing)
            self._heads, self._kv_heads, self._head_size = num_heads, kv_heads, head_size
            self._scale = attention.producer().attributes.get_float("scale", None)
            self._rotary = None if query_rope is None else dict(query_rope.producer().attributes)
            key_attrs = {} if key_rope is None else dict(key_rope.producer().attributes)
            if self._rotary is not None and key_attrs.get("interleaved") != self._rotary.get("interleaved"):
                return result.fail("Query and key rotate differently.", key_rope)
            return result

        def _norm_inputs(self, query_BSD, query_norm, key_norm) -> dict[str, Any] | None:
            """``q_norm_weight``/``k_norm_weight`` and their epsilon attributes, or None if the norms cannot go in."""
            norms = [n.producer() for n in (query_norm, key_norm)]
            weights = [n.inputs[1] if len(n.inputs) == 2 else None for n in norms]
            for node, weight in zip(norms, weights):  # over the head axis, a constant weight per channel, 1 output
                const = None if weight is None else _ir_utils.get_numpy_value(weight)
                if (
                    weight is None
                    or const is None
                    or const.shape != (self._head_size,)
                    or weight.dtype != query_BSD.dtype
                    or any(
                        node.attributes.get_int(name, default) != default
                        for name, default in (("axis", -1), ("stash_type", 1))
                    )
                    or any(out.uses() or out.is_graph_output() for out in node.outputs[1:])
                ):
                    return None
            q_eps, k_eps = (n.attributes.get_float("epsilon", 1e-5) for n in norms)
            eps = {"qk_norm_epsilon": q_eps} if q_eps == k_eps else {"q_norm_epsilon": q_eps, "k_norm_epsilon": k_eps}
            return {"weights": weights, "attrs": eps}

        def _inside(self, cos) -> bool:
            if not rotary_inside or self._rotary is None or self._head_size % 16:
                return False
            dim = self._rotary.get("rotary_embedding_dim")
            return (dim is None or dim.value in (0, self._head_size)) and _ir_utils.get_dim(
                cos, 1
            ) == self._head_size // 2

        def rewrite(
            self,
            op,
            query_BSD,
            key_BSDkv,
            value_BSDkv,
            past_key,
            past_value,
            position_ids,
            cos,
            sin,
            mask,
            query_BSHDh,
            key_BSHDh,
            output,
            output_shape,
            nothing=None,
            zero=None,
            query_norm=None,
            key_norm=None,
            **_,
        ):
            flat = op.Constant(value_ints=[0, 0, -1])
            query, key = query_BSD, key_BSDkv
            inside = self._inside(cos)
            norms = None  # Qwen3: per-head RMS norm of q/k before the rotary, inside for cuda (the CPU kernel lacks it)
            if query_norm is not None and qk_norm_inside and inside:
                norms = self._norm_inputs(query_BSD, query_norm, key_norm)
            if query_norm is not None and norms is None:
                query, key = (
                    op.Reshape(
                        op.SimplifiedLayerNormalization(x, *n.producer().inputs[1:], **n.producer().attributes), flat
                    )
                    for x, n in ((query_BSHDh, query_norm), (key_BSHDh, key_norm))
                )
            rotary_attrs = {k: a.value for k, a in (self._rotary or {}).items() if k != "num_heads"}
            if self._rotary is not None and not inside:
                query, key = (
                    op.RotaryEmbedding(x, position_ids, cos, sin, num_heads=heads, **rotary_attrs, _domain=_MS)
                    for x, heads in ((query, self._heads), (key, self._kv_heads))
                )
            # sizes read off the mask every layer shares, so that CSE leaves one copy of these nodes
            batch, sequence, total = (op.Shape(mask, start=i, end=i + 1) for i in (0, 2, 3))
            int32 = ir.DataType.INT32
            seqlens_k = op.Cast(op.Expand(op.Sub(total, op.Constant(value_ints=[1])), batch), to=int32)
            total_length = op.Cast(op.Squeeze(total, op.Constant(value_ints=[0])), to=int32)
            if past_key is None and query_seqlens:  # a prompt: an empty past, so that query_seqlens applies
                zeros = np.zeros((1, self._kv_heads, 0, self._head_size), dtype=mask.dtype.numpy())
                empty = op.Constant(value=ir.tensor(zeros))
                shape = op.Concat(batch, op.Constant(value_ints=[1, 1, 1]), axis=0)
                past_key = past_value = op.Expand(empty, shape)
            extra = [None, None, None, *(norms["weights"] if norms else [None, None])]  # head_sink, k/v_scale, norms
            if query_seqlens:
                extra.append(op.Cast(op.Expand(sequence, batch), to=int32))
            attrs: dict[str, Any] = {
                "num_heads": self._heads,
                "kv_num_heads": self._kv_heads,
                **(norms or {}).get("attrs", {}),
            }
            if self._scale is not None:
                attrs["scale"] = self._scale
            if inside:
                attrs.update(do_rotary=1, rotary_interleaved=int(rotary_attrs.get("interleaved", 0)))
                rotary_inputs = [cos, sin, position_ids]
            else:
                rotary_inputs = [None, None, None]
            result, present_key, present_value = op.GroupQueryAttention(
                query,
                key,
                value_BSDkv,
                past_key,
                past_value,
                seqlens_k,
                total_length,
                *rotary_inputs,
                mask,
                *extra,
                **attrs,
                _domain=_MS,
                _outputs=3,
            )
            # rows that attend to no key (left padding) are zeros, as in the unfused graph
            result = op.Where(op.Squeeze(nothing, op.Constant(value_ints=[1])), zero, result)
            if not _ir_utils.has_rank(output, 3):  # GPT-2 flattens to [batch * sequence, hidden] for its Conv1D
                result = op.Reshape(result, output_shape)
            return result, present_key, present_value

    modes = ("repeat", "grouped", "plain")
    return pattern.RewriteRuleSet(
        [GQA.rule(f"GQA{'Rotary' * r}{h.title()}", rotary=r, heads=h) for r in (True, False) for h in modes]
    )


def tanh_gelu_rules() -> Any:
    """The rule set turning the tanh approximation of GELU into ``FastGelu`` (operands in any order)."""
    import math

    from onnxscript.rewriter import _ir_utils, pattern

    expected = {"half": 0.5, "power": 3.0, "cubic": 0.044715, "scale": math.sqrt(2.0 / math.pi), "one": 1.0}

    class TanhGelu(pattern.RewriteRuleClassBase):
        def pattern(self, op, x, half, power, cubic, scale, one):
            inner = op.Mul(op.Add(x, op.Mul(op.Pow(x, power), cubic)), scale)
            return op.Mul(op.Mul(x, half), op.Add(op.Tanh(inner), one))

        def check(self, context, **bindings):  # type: ignore[override]  # onnxscript passes the pattern's bindings by name
            for name, value in expected.items():
                got = _ir_utils.get_singleton_value(bindings[name])
                if got is None or not math.isclose(float(got), value, rel_tol=1e-6):
                    return pattern.MatchResult().fail(f"{name} is not {value}.", bindings[name])
            return True

        def rewrite(self, op, x, **_):
            return op.FastGelu(x, _domain=_MS)

    return pattern.RewriteRuleSet([TanhGelu.rule()], commute=True)


def canonical_sums(model: Any) -> None:
    """Write symbolic dims that are sums of names in one order (``sequence + past_sequence`` becomes
    ``past_sequence + sequence``) on the graph's inner values: the rules compare dims by their text."""
    import re

    import onnx_ir as ir

    graph = model.graph
    io = {id(v) for v in (*graph.inputs, *graph.outputs)}
    sums = re.compile(r"^\w+( \+ \w+)+$")
    for node in graph:
        for value in node.outputs:
            if id(value) in io or value.shape is None:
                continue
            dims = list(value.shape)
            for axis, dim in enumerate(dims):
                if isinstance(dim, ir.SymbolicDim) and dim.value and sums.match(dim.value):
                    dims[axis] = ir.SymbolicDim(" + ".join(sorted(dim.value.split(" + "))))
            value.shape = ir.Shape(dims)


def _returned(value: Any) -> bool:
    """Whether the graph returns ``value``: as it is, or through a ``Cast`` (a graph computed in float32 that returns
    its cache in the model's bfloat16: :mod:`._widen`)."""
    if value.is_graph_output():
        return True
    return any(node.op_type == "Cast" and node.outputs[0].is_graph_output() for node, _ in value.uses())


def drop_identity_reshapes(model: Any) -> int:
    """Remove ``Reshape`` nodes whose input already has the output's shape (same sizes and symbols); returns how many.

    The exporter leaves ``view`` calls that keep the shape between the attention and its output transpose.
    """
    import onnx_ir as ir

    removed = 0
    for node in list(model.graph):
        if node.op_type != "Reshape" or node.domain != "":
            continue
        source, result = node.inputs[0], node.outputs[0]
        if source is None or source.shape is None or result.shape is None or result.is_graph_output():
            continue
        if len(source.shape) != len(result.shape) or any(a != b for a, b in zip(source.shape, result.shape)):
            continue
        if any(not isinstance(d, int) and (not isinstance(d, ir.SymbolicDim) or d.value is None) for d in source.shape):
            continue
        ir.convenience.replace_all_uses_with(result, source)
        model.graph.remove(node, safe=True)
        removed += 1
    return removed


def pack_projections(model: Any) -> int:
    """Pack ``MatMul`` nodes that share an input and have constant 2D weights into one; returns the packs made."""
    import numpy as np
    import onnx_ir as ir

    graph = model.graph
    groups: dict[int, list[Any]] = {}
    for node in graph:
        if node.op_type != "MatMul" or node.domain != "":
            continue
        weight = node.inputs[1].const_value if node.inputs[1] is not None else None
        if weight is not None and len(weight.shape) == 2 and node.inputs[0] is not None:
            groups.setdefault(id(node.inputs[0]), []).append(node)
    packs = 0
    for nodes in groups.values():
        weights = [n.inputs[1].const_value for n in nodes]
        if len(nodes) < 2 or len({(int(w.shape[0]), w.dtype) for w in weights}) != 1:
            continue
        name = f"{nodes[0].inputs[1].name}_packed{packs}"
        tensor = ConcatenatedTensor(weights, 1, name)  # computed when read: no packed copy held in memory
        packed = ir.Value(name=name, const_value=tensor)
        packed.shape, packed.type = tensor.shape, ir.TensorType(tensor.dtype)
        graph.register_initializer(packed)
        widths = np.array([int(w.shape[1]) for w in weights], dtype=np.int64)
        sizes = ir.Value(name=f"{packed.name}_sizes", const_value=ir.tensor(widths))
        graph.register_initializer(sizes)
        matmul = ir.node("MatMul", [nodes[0].inputs[0], packed])
        split = ir.node("Split", [matmul.outputs[0], sizes], attributes={"axis": -1}, num_outputs=len(nodes))
        graph.insert_before(nodes[0], [matmul, split])
        for node, part in zip(nodes, split.outputs):
            part.shape, part.type = node.outputs[0].shape, node.outputs[0].type
            ir.convenience.replace_all_uses_with(node.outputs[0], part)
            if node.outputs[0].is_graph_output():
                continue
            graph.remove(node, safe=True)
        _feed_packed(split)
        packs += 1
    return packs


def _feed_packed(split: Any) -> None:
    """Give a ``GroupQueryAttention`` fed exactly the three parts of ``split`` the packed tensor."""
    parts, packed = list(split.outputs), split.inputs[0]
    if len(parts) != 3:
        return

    def leading_dims(node: Any) -> bool:  # Shape reading batch/sequence, which the packed tensor shares
        start, end = node.attributes.get_int("start", 0), node.attributes.get_int("end", None)
        return node.op_type == "Shape" and 0 <= start and end is not None and end <= 2

    users = [[u for u in p.uses() if not leading_dims(u[0])] for p in parts]
    if any(len(u) != 1 for u in users):
        return
    gqa = users[0][0][0]
    if gqa.op_type != "GroupQueryAttention" or [(u[0][0], u[0][1]) for u in users] != [(gqa, 0), (gqa, 1), (gqa, 2)]:
        return
    for part in parts:
        for node, index in list(part.uses()):
            if node is not gqa:
                node.replace_input_with(index, packed)
    gqa.replace_input_with(0, packed)
    gqa.replace_input_with(1, None)
    gqa.replace_input_with(2, None)
    split.graph.remove(split, safe=True)
