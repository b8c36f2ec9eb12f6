"""An ONNX Runtime session over an in-memory graph that reads the weights where they already are.

The export's parity check runs the graph once, right after lowering, while the weights are still the model's own
tensors. Saving the graph to a temporary folder for ONNX Runtime to read would write and then load a second copy
of every weight (and ORT's prepacking a third). Here the graph goes to ONNX Runtime without its large tensors,
each one handed over with ``SessionOptions.add_initializer`` as a view of its memory; a lazily transposed weight
(:func:`~._weights.TransposedTensor`) is handed over untransposed behind a ``Transpose`` node. The session runs
without graph optimizations or prepacking, which would copy them: it computes what the graph says, once.

ONNX Runtime checks that external data exists before it uses the tensors given to it instead: the graph's large
tensors point into a sparse file (no disk blocks) in a temporary folder, which is never read.
"""

from __future__ import annotations

import os
import tempfile
from typing import Any

from ._weights import EXTERNAL_MIN_BYTES, _swapped, is_transposed, zero_copy_array

__all__ = ["memory_session"]

_PLACEHOLDER = "hub_export_in_memory"


def _typed(array: Any, tensor: Any) -> Any:
    """The uint8 view as an array of the tensor's shape and element size."""
    import numpy as np

    size = tensor.dtype.itemsize
    kind = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[int(size)]
    return array.view(kind).reshape([int(d) for d in tensor.shape])


def memory_session(program: Any, providers: list[Any]) -> tuple[Any, Any]:
    """An ``InferenceSession`` running ``program`` on its weights' own memory; returns it and what must stay alive
    with it.

    Raises:
        Exception: Whatever ONNX Runtime raises for an invalid graph.
    """
    import numpy as np
    import onnx
    import onnx_ir as ir
    import onnxruntime as ort

    values, placeholders, feeds, transposes = [], [], [], []
    for value in program.graph.initializers.values():
        tensor = value.const_value
        if tensor is None or tensor.nbytes < EXTERNAL_MIN_BYTES or tensor.dtype.bitwidth < 8:
            continue
        source = tensor.source if is_transposed(tensor) else tensor
        array = zero_copy_array(source)
        if array is None:  # computed (packed, widened): one copy, held by the session only
            array = np.ascontiguousarray(source.numpy()).reshape(-1).view(np.uint8)
        name = f"{value.name}__source" if source is not tensor else value.name
        feeds.append((name, _typed(array, source), int(source.dtype)))
        if source is not tensor:
            transposes.append((value.name, name, tensor.perm, [int(d) for d in source.shape]))
        values.append(value)
        placeholders.append(
            ir.ExternalTensor(_PLACEHOLDER, 0, tensor.nbytes, tensor.dtype, shape=tensor.shape, name=value.name)
        )
    with _swapped(values, placeholders):
        proto = ir.serde.serialize_model(program)
    initializers = {init.name: init for init in proto.graph.initializer}
    first_use: dict[str, int] = {}
    for index, node in enumerate(proto.graph.node):
        for name in node.input:
            first_use.setdefault(name, index)
    inserts = []
    for name, source, perm, shape in transposes:
        init = initializers[name]
        init.name = source
        del init.dims[:]
        init.dims.extend(shape)
        node = onnx.helper.make_node("Transpose", [source], [name], perm=list(perm))
        inserts.append((first_use.get(name, 0), node))
    # each transpose right before its first reader: ORT runs it there, and frees it after its last one
    for index, node in sorted(inserts, key=lambda item: -item[0]):
        proto.graph.node.insert(index, node)
    folder = tempfile.TemporaryDirectory(prefix="hub_export_onnx_parity_")
    with open(os.path.join(folder.name, _PLACEHOLDER), "wb") as handle:
        handle.truncate(max((p.nbytes for p in placeholders), default=0))  # sparse: never read
    path = os.path.join(folder.name, "model.onnx")
    with open(path, "wb") as handle:
        handle.write(proto.SerializeToString())
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.add_session_config_entry("session.disable_prepacking", "1")
    options.enable_cpu_mem_arena = False  # what a step frees goes back to the system
    options.log_severity_level = 3
    kept = []
    for name, array, onnx_type in feeds:
        value = ort.OrtValue.ortvalue_from_numpy_with_onnx_type(array, onnx_type)
        options.add_initializer(name, value)
        kept.append((value, array))
    session = ort.InferenceSession(path, options, providers=providers)
    return session, (options, kept, folder)
