"""The KV-cache state laid out so that OpenVINO's CPU plugin fuses attention with it.

After MakeStateful, each cache input is a ``ReadValue`` and each cache output an ``Assign`` of one variable; a
layer's attention reads ``Concat(ReadValue, new entries)``. The CPU plugin replaces that ``Concat`` and the
``ScaledDotProductAttention`` reading it with one node that appends the new entries to the state in place (its
stateful SDPA fusion, ``StatefulSDPAFusion`` in OpenVINO's CPU plugin) only when:

* the state goes through a ``Gather`` along the batch axis, with 1-d int32 indices, before the ``Concat`` (the
  beam-search reorder; here a model input ``beam_idx``, which the runner feeds as ``0..batch-1``);
* the ``ReadValue`` has an initializer (here zeros of ``[batch, ..., 0, ...]``, the batch read from the main input).

Without both the plugin concatenates the whole cache every step and runs attention as separate matrix products
(measured on a 58M Llama: 804 nodes in the compiled graph instead of 516).
"""

from __future__ import annotations

from typing import Any

__all__ = ["BEAM_INPUT", "fuse_state_attention"]

#: The input the runner feeds with the batch rows to keep (``0..batch-1`` for a plain step).
BEAM_INPUT = "beam_idx"


def fuse_state_attention(model: Any, batch_axis: int = 0) -> int:
    """Insert the beam ``Gather`` before every ``Concat`` that reads a cache state, and give those states a zero
    initializer; returns the number of states changed (0 when the model has none, or no ``input_ids`` /
    ``inputs_embeds`` input to read the batch from).

    Args:
        model: A stateful ``openvino.Model`` (after MakeStateful), changed in place.
        batch_axis: The cache tensors' batch axis.
    """
    import numpy as np
    from openvino import PartialShape, Type, opset13

    main = [p for p in model.get_parameters() if p.output(0).get_names() & {"input_ids", "inputs_embeds"}]
    states = [op for op in model.get_ops() if op.get_type_name() == "ReadValue"]
    concatenated = [
        state
        for state in states
        if any(t.get_node().get_type_name() == "Concat" for t in state.output(0).get_target_inputs())
    ]
    if not main or not concatenated or any(p.output(0).get_names() & {BEAM_INPUT} for p in model.get_parameters()):
        return 0
    beam = opset13.parameter(PartialShape([-1]), Type.i32, name=BEAM_INPUT)
    beam.output(0).get_tensor().set_names({BEAM_INPUT})
    shape_of_main = opset13.shape_of(main[0], output_type="i64")
    batch = opset13.gather(shape_of_main, opset13.constant(np.array([0], np.int64)), opset13.constant(np.int64(0)))
    axis = opset13.constant(np.int64(batch_axis))
    for state in concatenated:
        dims: list[Any] = []
        for i, dim in enumerate(state.get_output_partial_shape(0)):
            if i == batch_axis:
                dims.append(batch)
            else:
                length = dim.get_length() if dim.is_static else 0  # the sequence axis starts empty
                dims.append(opset13.constant(np.array([length], np.int64)))
        # converted, not built in the state's type: numpy has no bfloat16 (to_dtype() gives float16 for it)
        zero = opset13.convert(opset13.constant(np.zeros((), dtype=np.float32)), state.get_output_element_type(0))
        state.set_arguments([opset13.broadcast(zero, opset13.concat(dims, axis=0))])
        for target in list(state.output(0).get_target_inputs()):
            if target.get_node().get_type_name() == "Concat":
                target.replace_source_output(opset13.gather(state.output(0), beam, axis, batch_dims=0).output(0))
    model.add_parameters([beam])
    model.validate_nodes_and_infer_types()
    return len(concatenated)
