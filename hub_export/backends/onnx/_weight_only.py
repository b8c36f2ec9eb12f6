"""Weight-only quantization of the in-memory graph, one weight at a time, with ONNX Runtime's own quantizer.

ONNX Runtime's ``MatMulNBitsQuantizer`` takes a whole ``ModelProto``: run on a saved export it loads every weight
into memory at once (and the export saved every weight to a temporary file first), which for an 8B model is more
than a 24 GB machine holds. Here the same quantizer (``DefaultWeightOnlyQuantizer``, round to nearest in blocks, its
C++ kernels) is handed one node at a time, in a graph holding that node's weight only, so:

* a weight is read (a view of the model's parameter, or a lazily widened or transposed copy of it: :mod:`._widen`,
  :mod:`._weights`) only while its node is quantized;
* each quantized tensor goes straight to a temporary file (:class:`SpillFile`) and the graph reads it from there,
  mapped: pages the kernel can drop and read again, so the quantized model is not held in memory besides the model;
* the nodes it returns (``MatMulNBits``, ``GatherBlockQuantized``, a ``Reshape`` for weights with leading unit
  dims) are the ones ``MatMulNBitsQuantizer`` writes, with the same tensors.

A tied input embedding then reads the output projection's quantized weights (:mod:`._tied`).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import weakref
from pathlib import Path
from typing import Any

from ._tied import share_tied_tables, tied_tables
from ._weights import _ALIGN, _ALIGN_OVER, EXTERNAL_MIN_BYTES, _chunks, unique_initializer_name

__all__ = ["SpillFile", "quantize_weight_only"]


class SpillFile:
    """Quantized tensors written to a temporary file as they are made, read back as mapped ``ExternalTensor`` s.

    The folder lives as long as the graph it is :meth:`kept_with` (it is removed when the graph is collected).
    """

    def __init__(self) -> None:
        self.directory = Path(tempfile.mkdtemp(prefix="hub_export_weights_"))
        self.name = "weights.data"
        self._file = open(self.directory / self.name, "wb")  # noqa: SIM115 - closed in close()
        self.bytes = 0

    def add(self, tensor: Any, name: str) -> Any:
        """Write ``tensor`` (an ``onnx_ir`` tensor) and return the ``ExternalTensor`` reading it from the file; aligned
        and written as the saved data files are (:func:`._weights.write_programs`)."""
        import onnx_ir as ir

        offset = self._file.tell()
        if tensor.nbytes > _ALIGN_OVER and offset % _ALIGN:
            self._file.write(b"\0" * (_ALIGN - offset % _ALIGN))
            offset = self._file.tell()
        for chunk in _chunks(tensor):
            self._file.write(chunk)
        self._file.flush()
        nbytes = self._file.tell() - offset
        self.bytes += nbytes
        return ir.ExternalTensor(
            self.name, offset, nbytes, tensor.dtype, shape=tensor.shape, name=name, base_dir=str(self.directory)
        )

    def close(self) -> None:
        self._file.close()

    def kept_with(self, owner: Any) -> None:
        """Remove the folder when ``owner`` is collected (or at exit)."""
        self.close()
        if self.bytes:
            weakref.finalize(owner, shutil.rmtree, str(self.directory), True)
        else:
            shutil.rmtree(self.directory, ignore_errors=True)


def quantize_weight_only(model: Any, cfg: Any, op_types: tuple[str, ...]) -> Any:
    """Quantize every ``MatMul`` (and, if asked, ``Gather``) by a constant weight of ``model`` in place, with the
    :class:`~.quantization.OnnxRuntimeWeightOnlyConfig` ``cfg``; returns ``model``."""
    from onnxruntime.quantization.matmul_nbits_quantizer import (
        DefaultWeightOnlyQuantConfig,
        DefaultWeightOnlyQuantizer,
    )

    quantizer = DefaultWeightOnlyQuantizer(
        DefaultWeightOnlyQuantConfig(
            block_size=cfg.block_size,
            is_symmetric=cfg.symmetric,
            accuracy_level=cfg.accuracy_level,
            op_types_to_quantize=op_types,
            bits=cfg.bits,
        )
    )
    tied = tied_tables(model, cfg.block_size) if cfg.quantize_tied_embedding else []
    excluded = set(cfg.nodes_to_exclude or ())
    spill = SpillFile()
    try:
        for graph in list(model.graphs()):
            for node in list(graph):
                if node.op_type in op_types and node.domain in ("", "ai.onnx") and node.name not in excluded:
                    _quantize_node(quantizer, graph, node, spill)
    finally:
        spill.kept_with(model)
    share_tied_tables(model, tied)
    model.opset_imports.setdefault("com.microsoft", 1)
    if "Gather" in op_types:  # int4 tensors need opset 21 and IR version 10, as MatMulNBitsQuantizer sets them
        model.opset_imports[""] = max(model.opset_imports.get("", 21), 21)
        model.ir_version = max(model.ir_version or 10, 10)
    return model


def _quantize_node(quantizer: Any, graph: Any, node: Any, spill: SpillFile) -> None:
    """Quantize one node's weight with ONNX Runtime's quantizer and put the node(s) it makes in its place."""
    import onnx_ir as ir

    index = 1 if node.op_type == "MatMul" else 0
    if len(node.inputs) <= index or node.inputs[index] is None:
        return
    weight = node.inputs[index]
    tensor = weight.const_value
    if not weight.is_initializer() or tensor is None or tensor.dtype not in (ir.DataType.FLOAT, ir.DataType.FLOAT16):
        return
    owner = weight.graph if weight.graph is not None else graph

    def initializer(name: str, array: Any) -> Any:
        made: Any = ir.Tensor(array, name=unique_initializer_name(owner, name))
        if made.nbytes >= EXTERNAL_MIN_BYTES:
            made = spill.add(made, str(made.name))
        value = ir.Value(name=made.name, const_value=made, shape=made.shape, type=ir.TensorType(made.dtype))
        owner.register_initializer(value)
        return value

    if node.op_type == "MatMul" and len(tensor.shape) == 2:
        new_nodes, final = _matmul_nbits(quantizer.config, node, weight, initializer, quantizer)
    else:
        made = _through_protos(quantizer, graph, node, weight, initializer)
        if made is None:
            return
        new_nodes, final = made
    ir.convenience.replace_nodes_and_values(graph, node, [node], new_nodes, [node.outputs[0]], [final])
    if not weight.uses() and not weight.is_graph_output():
        owner.initializers.pop(str(weight.name), None)


def _matmul_nbits(cfg: Any, node: Any, weight: Any, initializer: Any, quantizer: Any) -> tuple[list[Any], Any]:
    """The ``MatMulNBits`` node ``DefaultWeightOnlyQuantizer.quantize_matmul`` makes for a 2D weight, from the blocks
    its C++ kernel quantizes (``qbits_block_quant``), without copying the weight into a ``TensorProto`` twice."""
    import numpy as np
    import onnx_ir as ir

    rows, cols = (int(d) for d in weight.const_value.shape)
    # its kernel reads the buffer row-major whatever the strides: a folded constant may be a transposed view
    array = np.ascontiguousarray(weight.const_value.numpy())
    packed, scales, zero_points = quantizer.qbits_block_quant(array)
    del array
    bits = cfg.bits
    inputs = [
        node.inputs[0],
        initializer(f"{weight.name}_Q{bits}", packed),
        initializer(f"{weight.name}_scales", scales),
    ]
    if not cfg.is_symmetric:
        inputs.append(initializer(f"{weight.name}_zero_points", zero_points))
    attributes = {"K": rows, "N": cols, "bits": bits, "block_size": cfg.block_size}
    if cfg.accuracy_level:  # left out when 0, as ONNX Runtime's quantizer does
        attributes["accuracy_level"] = cfg.accuracy_level
    name = f"{node.name}_Q{bits}" if node.name else None
    made = ir.node("MatMulNBits", inputs, attributes=attributes, domain="com.microsoft", name=name)
    return [made], made.outputs[0]


def _through_protos(quantizer: Any, graph: Any, node: Any, weight: Any, initializer: Any) -> Any:
    """Any other node (``Gather``, a weight with leading unit dims): ONNX Runtime's ``quantize`` on a graph holding
    this node's weight only; the nodes it returns and their tensors, or None when it left the node as it was."""
    import onnx
    import onnx_ir as ir

    for value in (*node.inputs, *node.outputs):
        if value is not None and not value.name:
            value.name = unique_initializer_name(graph, f"{node.name or node.op_type}_value")
    scratch = onnx.GraphProto()
    scratch.initializer.append(onnx.numpy_helper.from_array(weight.const_value.numpy(), str(weight.name)))
    proto = onnx.NodeProto(
        op_type=node.op_type,
        name=node.name or "",
        input=[v.name if v is not None else "" for v in node.inputs],
        output=[str(v.name) for v in node.outputs],
    )
    proto.attribute.extend(ir.serde.serialize_attribute(a) for a in node.attributes.values())
    made = quantizer.quantize(proto, [scratch])
    if len(made) == 1 and made[0] is proto:  # left as it was (a shape it does not quantize)
        return None
    values = {str(v.name): v for v in node.inputs if v is not None}
    for init in scratch.initializer:
        if init.name != weight.name:
            values[init.name] = initializer(init.name, ir.serde.deserialize_tensor(init).numpy())
    del scratch
    new_nodes, final = [], None
    original = str(node.outputs[0].name)
    for made_node in made:
        inputs = [values[name] if name else None for name in made_node.input]
        attributes = [ir.serde.deserialize_attribute(a) for a in made_node.attribute]
        new = ir.Node(
            made_node.domain,
            made_node.op_type,
            inputs,
            attributes,
            num_outputs=len(made_node.output),
            name=made_node.name or None,
        )
        for out, name in zip(new.outputs, made_node.output):
            if name == original:
                final = out
            else:
                out.name = name
                values[name] = out
        new_nodes.append(new)
    if final is None:
        raise RuntimeError(f"ONNX Runtime's quantizer dropped the output of {node.name!r}.")
    return new_nodes, final


def spill_directory_of(model: Any) -> str | None:
    """The spill folder the quantized tensors of ``model`` are read from, if any (for tests and diagnostics)."""
    import onnx_ir as ir

    for graph in model.graphs():
        for value in graph.initializers.values():
            tensor = value.const_value
            if isinstance(tensor, ir.ExternalTensor) and os.path.basename(str(tensor.base_dir)).startswith(
                "hub_export_weights_"
            ):
                return str(tensor.base_dir)
    return None
