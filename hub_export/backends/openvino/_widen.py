"""A bfloat16 graph computed in float32 inside, bfloat16 at its edges: for weight-compressed exports.

NNCF compresses each weight into the same chain whatever the model's dtype: ``Constant(int4) -> Convert(f16) ->
Multiply(scale) -> Reshape -> Convert -> MatMul``, the last ``Convert`` going to the graph's type. OpenVINO's CPU
plugin runs that chain compressed (its ``FullyConnected`` reads the int4 weights) only when it sees it in the
precision it computes in. A bfloat16 graph compiled under the float32 hint the export records gets a bfloat16 ->
float32 conversion added after the chain, and the plugin then decompresses every weight when it compiles (openvino
2026.4, measured on a 4-layer Llama-3.2-1B in bfloat16 with ``int4_sym``: +4.1 GB at compile time, against +0.03 GB
for the same compression of the float32 model).

So before NNCF runs, a bfloat16 graph is made float32 inside, the way ``optimum-intel`` traces 16-bit models: each
bfloat16 constant keeps its bytes (shared with the torch parameter, never copied) and gets a ``Convert`` to
float32 marked as a decompression, every ``Convert`` to bfloat16 inside the graph converts to float32 instead, each
bfloat16 input gets a ``Convert`` to float32 and each bfloat16 output a ``Convert`` back. NNCF then compresses the
float32 weight pattern, from the bfloat16 values (its int4 weights and scales are those of the float32 copy). The
export's signature keeps the model's bfloat16 inputs and outputs; a cache kept as OpenVINO state is float32 (see
:func:`widen_bfloat16`), as the CPU plugin keeps a bfloat16 state anyway under the float32 hint.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

__all__ = ["bfloat16_graph", "widen_bfloat16"]

#: The runtime-info key of OpenVINO's mark on a ``Convert`` that decompresses a low-precision constant (its
#: ``ov::Decompression`` attribute, which constant folding leaves alone).
DECOMPRESSION = "decompression"


def bfloat16_graph(model: Any) -> bool:
    """Whether ``model`` (an ``openvino.Model``) has a bfloat16 input, output or constant."""
    from openvino import Type

    ports = [*model.inputs, *model.outputs]
    if any(port.get_element_type() == Type.bf16 for port in ports):
        return True
    return any(
        op.get_type_name() == "Constant" and op.get_output_element_type(0) == Type.bf16 for op in model.get_ops()
    )


def widen_bfloat16(model: Any, states: Collection[str] = ()) -> int:
    """Make ``model`` compute in float32: a decompression ``Convert`` after each bfloat16 constant, a ``Convert``
    after each bfloat16 input and before each bfloat16 output, every ``Convert`` to bfloat16 retargeted to float32;
    returns the number of nodes changed. ``model`` is changed in place and its types inferred again.

    Args:
        model: An ``openvino.Model`` with named ports.
        states: The names of the inputs and outputs that will become OpenVINO state: they become float32 themselves,
            without a ``Convert``. The CPU plugin fuses attention with a state only when the state feeds the beam
            ``Gather`` directly or through one ``Convert``, and it moves such a ``Convert`` past the ``Gather``
            before it looks (openvino 2026.4: a bfloat16 state behind a ``Convert`` was never fused), so a state
            of a widened graph holds float32, as the plugin's own state does under the float32 hint.
    """
    import openvino.opset13 as ops
    from openvino import Type

    bf16, f32 = Type.bf16, Type.f32
    state_names = set(states)
    narrowed = [
        result
        for result in model.get_results()
        if result.get_input_element_type(0) == bf16 and not (result.output(0).get_names() & state_names)
    ]
    changed = 0
    for op in model.get_ordered_ops():
        kind = op.get_type_name()
        if kind == "Convert" and op.get_output_element_type(0) == bf16:
            op.set_attribute("destination_type", "f32")
            changed += 1
        elif kind == "Parameter" and op.get_output_element_type(0) == bf16 and op.output(0).get_names() & state_names:
            op.set_element_type(f32)
            changed += 1
        elif kind in ("Constant", "Parameter") and op.get_output_element_type(0) == bf16:
            # a shape read keeps its own edge: the plugin fuses a state's attention only when the state's
            # Convert has a single reader (StatefulSDPAFusion, openvino 2026.4)
            targets = [t for t in op.output(0).get_target_inputs() if t.get_node().get_type_name() != "ShapeOf"]
            widened = ops.convert(op.output(0), f32)
            widened.set_friendly_name(f"{op.get_friendly_name()}/widened")
            if kind == "Constant":
                widened.get_rt_info()[DECOMPRESSION] = ""
            for target in targets:
                target.replace_source_output(widened.output(0))
            changed += 1
    model.validate_nodes_and_infer_types()
    for result in narrowed:
        source = result.input_value(0)
        narrow = ops.convert(source, bf16)
        narrow.set_friendly_name(f"{result.get_friendly_name()}/narrowed")
        names = source.get_tensor().get_names()  # the output's name moves to the tensor it now returns
        source.get_tensor().set_names(set())
        narrow.output(0).get_tensor().set_names(names)
        result.input(0).replace_source_output(narrow.output(0))
        changed += 1
    model.validate_nodes_and_infer_types()
    return changed
