"""Tied embeddings in weight-only quantized graphs: the lookup table stored once, quantized, with the output projection.

A language model whose input embedding is also its output projection (``tie_word_embeddings``) reaches the
quantizer as a ``Gather`` of a ``[vocab, hidden]`` table and a ``MatMul`` by its ``[hidden, vocab]`` transpose.
``MatMulNBitsQuantizer`` turns the ``MatMul`` into ``MatMulNBits`` but leaves the ``Gather`` reading the float
table: at Qwen2-0.5B's size that is 545 MB of float32 kept for a lookup of one row per token.

:func:`tied_tables` finds those pairs before quantizing (by value: the table equals the projection's transpose);
:func:`share_tied_tables` then replaces each ``Gather`` with ONNX Runtime's ``com.microsoft`` ``GatherBlockQuantized``
reading the ``MatMulNBits`` weights themselves (reshaped from ``[vocab, blocks, blob]`` to ``[vocab, blocks * blob]``),
its scales and zero points. With ``uint8`` data that operator follows ``MatMulNBits``' conventions (4 or 8 bits, the
same packing, a default zero point of 8 or 128), so a looked-up row is exactly the projection's dequantized column;
the float table is dropped. onnxruntime-genai's model builder stores tied int4 embeddings the same way.
"""

from __future__ import annotations

from typing import Any

__all__ = ["tied_tables", "share_tied_tables"]


def tied_tables(model: Any, block_size: int) -> list[tuple[str, str]]:
    """``(gather output, matmul output)`` name pairs of the main graph whose ``Gather`` table (an initializer, axis 0)
    is the transpose of a ``MatMul``'s constant weight, so the quantizer turns that ``MatMul`` into ``MatMulNBits``.

    Three shapes of the output projection are recognised: a ``MatMul`` by a constant equal to the table's transpose
    (the table stored twice), a ``MatMul`` by a ``Transpose`` of the table, and a ``com.microsoft`` ``FusedMatMul``
    reading the table through ``transB`` (the ORT fusions' form of the latter). The last two are rewritten, in
    place, into a ``MatMul`` by a lazily transposed copy of the table (:func:`._weights.TransposedTensor`), which the
    quantizer then quantizes. Tables whose hidden size is not a whole number of ``block_size`` blocks are left alone.
    """
    import numpy as np
    import onnx_ir as ir

    from ._weights import TransposedTensor, is_transposed, unique_initializer_name

    graph = model.graph
    tables: dict[Any, Any] = {}
    for node in graph:
        if node.op_type != "Gather" or node.domain not in ("", "ai.onnx") or len(node.inputs) != 2:
            continue
        axis = node.attributes.get("axis")
        table = node.inputs[0]
        tensor = table.const_value if table is not None and table.is_initializer() else None
        if (axis is not None and axis.as_int() != 0) or tensor is None or len(tensor.shape) != 2:
            continue
        if int(tensor.shape[1]) % block_size == 0:
            tables[table] = node
    pairs: list[tuple[str, str]] = []
    for node in list(graph):
        weight = _projection_of(node, tables)
        if weight is not None:  # the table itself, transposed at run time: a MatMul by its transposed copy
            tensor = weight.const_value
            name = unique_initializer_name(graph, f"{weight.name}.T")
            transposed = TransposedTensor(tensor, (1, 0), name)
            copy = ir.Value(name=name, const_value=transposed)
            copy.shape, copy.type = transposed.shape, ir.TensorType(tensor.dtype)
            graph.register_initializer(copy)
            matmul = ir.node("MatMul", inputs=[node.inputs[0], copy], name=f"{node.name}_untransposed")
            transpose = node.inputs[1].producer() if node.op_type == "MatMul" else None
            old = [node] if transpose is None else [transpose, node]
            ir.convenience.replace_nodes_and_values(graph, node, old, [matmul], node.outputs, matmul.outputs)
            pairs.append((str(tables[weight].outputs[0].name), str(matmul.outputs[0].name)))
            continue
        if node.op_type != "MatMul" or node.domain not in ("", "ai.onnx") or len(node.inputs) != 2:
            continue
        value = node.inputs[1]
        tensor = value.const_value if value is not None else None
        if tensor is None or len(tensor.shape) != 2:
            continue
        for table, gather in tables.items():
            source = table.const_value
            if tuple(source.shape) != (tensor.shape[1], tensor.shape[0]):
                continue
            if is_transposed(tensor) and tuple(tensor.perm) == (1, 0):
                same = tensor.source is source or np.array_equal(tensor.source.numpy(), source.numpy())
            else:
                same = np.array_equal(tensor.numpy().T, source.numpy())
            if same:
                pairs.append((str(gather.outputs[0].name), str(node.outputs[0].name)))
                break
    return pairs


def _projection_of(node: Any, tables: dict[Any, Any]) -> Any:
    """The table ``node`` multiplies by transposed (``MatMul`` of a ``Transpose`` of it, or ``FusedMatMul`` with
    only ``transB`` set), else None."""
    if len(node.inputs) != 2 or node.inputs[1] is None:
        return None
    if node.op_type == "FusedMatMul" and node.domain == "com.microsoft":
        flags = {name: node.attributes[name].value for name in node.attributes}
        plain = all(not flags.get(f, 0) for f in ("transA", "transBatchA", "transBatchB"))
        if plain and flags.get("transB", 0) == 1 and float(flags.get("alpha", 1.0)) == 1.0:
            return node.inputs[1] if node.inputs[1] in tables else None
        return None
    if node.op_type == "MatMul" and node.domain in ("", "ai.onnx"):
        producer = node.inputs[1].producer()
        if producer is None or producer.op_type != "Transpose" or len(node.inputs[1].uses()) != 1:
            return None
        perm = producer.attributes.get("perm")
        if (perm is None or tuple(perm.as_ints()) == (1, 0)) and producer.inputs[0] in tables:
            return producer.inputs[0]
    return None


def share_tied_tables(model: Any, pairs: list[tuple[str, str]]) -> int:
    """Rewrite the quantized ``model`` in place so each paired ``Gather`` reads its ``MatMulNBits``' weights; returns
    how many were rewritten. A pair whose ``MatMul`` was not quantized, or whose hidden size is not a whole number of
    blocks (the quantized rows are padded), keeps its float ``Gather``."""
    import numpy as np
    import onnx_ir as ir

    from ._weights import unique_initializer_name

    if not pairs:
        return 0
    graph = model.graph
    by_output = {value.name: node for node in graph for value in node.outputs}
    rewritten = 0
    for gather_output, matmul_output in pairs:
        gather, matmul = by_output.get(gather_output), by_output.get(matmul_output)
        if gather is None or matmul is None or gather.op_type != "Gather" or matmul.op_type != "MatMulNBits":
            continue
        weight = matmul.inputs[1]
        tensor = weight.const_value if weight is not None else None
        attrs = {name: attr.as_int() for name, attr in matmul.attributes.items() if attr.type == ir.AttributeType.INT}
        if tensor is None or len(tensor.shape) != 3 or attrs["K"] != int(tensor.shape[1]) * attrs["block_size"]:
            continue
        rows, blocks, blob = (int(d) for d in tensor.shape)
        name = unique_initializer_name(graph, f"{weight.name}_rows_shape")
        shape = ir.Value(name=name, const_value=ir.tensor(np.array([rows, blocks * blob], dtype=np.int64), name=name))
        shape.shape, shape.type = ir.Shape([2]), ir.TensorType(ir.DataType.INT64)
        graph.register_initializer(shape)
        reshape = ir.node("Reshape", [weight, shape], name=f"{gather.name}_rows")
        reshape.outputs[0].name = f"{weight.name}_rows"
        inputs = [reshape.outputs[0], gather.inputs[1], matmul.inputs[2]]
        if len(matmul.inputs) > 3 and matmul.inputs[3] is not None:
            inputs.append(matmul.inputs[3])  # zero points: [vocab, packed blocks], the layout both operators read
        lookup = ir.node(
            "GatherBlockQuantized",
            inputs,
            attributes={"gather_axis": 0, "quantize_axis": 1, "block_size": attrs["block_size"], "bits": attrs["bits"]},
            domain="com.microsoft",
            name=f"{gather.name}_quantized",
        )
        table = gather.inputs[0]
        ir.convenience.replace_nodes_and_values(
            graph, gather, [gather], [reshape, lookup], gather.outputs, lookup.outputs
        )
        if table is not None and table.is_initializer() and not table.uses() and not table.is_graph_output():
            graph.initializers.pop(str(table.name), None)
        rewritten += 1
    if rewritten:
        model.opset_imports.setdefault("com.microsoft", 1)
    return rewritten
