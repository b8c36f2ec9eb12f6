"""A bfloat16 graph computed in float32 inside, bfloat16 at its edges: for weight-only quantized exports.

ONNX Runtime's CPU provider has no bfloat16 kernels for most operators (``Mul``, ``Add``, ``MatMul``: onnxruntime
1.32), so a bfloat16 model is refused for ONNX unless its weights are quantized: ``MatMulNBits`` computes in float32
from int4/int8 weights, and the weights are quantized from the bfloat16 tensors one at a time
(:mod:`._weight_only`). What stays float in the graph (norms, biases, an untied embedding table) is widened to
float32, large tensors lazily (:func:`._weights.WidenedTensor`: computed when read, never kept), so no float32 copy of the
model is ever held.

The graph's inputs and outputs keep the model's bfloat16 (a ``Cast`` on each side): the export's signature, the
cache the generation loop builds and the logits it returns are those of the eager model, and the cache is rounded
to bfloat16 between steps as eager's is.
"""

from __future__ import annotations

from typing import Any

from ._weights import WidenedTensor

__all__ = ["bfloat16_values", "widen_bfloat16"]

#: Elements above which a bfloat16 initializer is widened lazily (on every read) instead of at once.
_LAZY_MIN_ELEMENTS = 8192
#: Attributes that name an element type (``Cast``'s ``to``, the generators' ``dtype``).
_TYPE_ATTRIBUTES = ("to", "dtype")


def bfloat16_values(model: Any) -> bool:
    """Whether any initializer, input or output of the main graph is bfloat16."""
    import onnx_ir as ir

    graph = model.graph
    values = [*graph.inputs, *graph.outputs, *graph.initializers.values()]
    return any(v.dtype == ir.DataType.BFLOAT16 for v in values)


def widen_bfloat16(model: Any) -> int:
    """Make every bfloat16 value, initializer, constant and type attribute of ``model`` float32, with a ``Cast`` from
    each bfloat16 graph input and to each bfloat16 graph output (which keep their names and type); returns how many
    values were widened."""
    import onnx_ir as ir

    bf16, f32 = ir.DataType.BFLOAT16, ir.DataType.FLOAT
    graph = model.graph
    edge_outputs = [i for i, v in enumerate(graph.outputs) if v.dtype == bf16]
    widened = 0
    for sub in model.graphs():
        for value in sub.initializers.values():
            tensor = value.const_value
            if tensor is not None and tensor.dtype == bf16:
                value.const_value = _widened(tensor, value.name)
                value.dtype = f32
                widened += 1
        for node in ir.traversal.RecursiveGraphIterator(sub):
            for name, attr in list(node.attributes.items()):
                if attr.type == ir.AttributeType.TENSOR and attr.value.dtype == bf16:
                    node.attributes[name] = ir.AttrTensor(name, _widened(attr.value, attr.value.name, lazy=False))
                elif name in _TYPE_ATTRIBUTES and attr.type == ir.AttributeType.INT and attr.value == bf16:
                    node.attributes[name] = ir.AttrInt64(name, int(f32))
            for value in node.outputs:
                if value.dtype == bf16:
                    value.dtype = f32
                    widened += 1
    for value in list(graph.inputs):
        if value.dtype != bf16:
            continue
        cast = ir.node("Cast", [value], attributes={"to": int(f32)}, name=f"{value.name}_widened")
        out = cast.outputs[0]
        out.name, out.shape, out.dtype = f"{value.name}__float32", value.shape, f32
        for user, index in list(value.uses()):
            if user is not cast:
                user.replace_input_with(index, out)
        if len(graph):
            graph.insert_before(graph[0], cast)
        else:
            graph.append(cast)
        widened += 1
    for index in edge_outputs:
        value = graph.outputs[index]
        name = value.name
        value.name = f"{name}__float32"
        cast = ir.node("Cast", [value], attributes={"to": int(bf16)}, name=f"{name}_narrowed")
        out = cast.outputs[0]
        out.name, out.shape, out.dtype = name, value.shape, bf16
        graph.append(cast)
        graph.outputs[index] = out
    return widened


def _widened(tensor: Any, name: str | None, *, lazy: bool = True) -> Any:
    """``tensor`` as float32: a :func:`._weights.WidenedTensor` when large, else a float32 copy."""
    import numpy as np
    import onnx_ir as ir

    if lazy and tensor.size > _LAZY_MIN_ELEMENTS:
        return WidenedTensor(tensor, name or "")
    return ir.Tensor(tensor.numpy().astype(np.float32), name=name)
