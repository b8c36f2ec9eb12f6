"""Workarounds applied while OpenVINO converts an ExportedProgram; each is reversible and names its bug.

* :func:`skip_empty_cat_inputs`, :func:`pin_reshape_wildcards` — node args rewritten inside the block
  (:func:`_rewritten_args`), restored after.
* :func:`zero_fully_masked_attention_rows` — a zero key/value added to each masked attention, removed after.
* :func:`distinct_outputs` — an identity op for each repeat of a tensor returned twice, removed after.
* :func:`retrace_size_oblivious` — ``backed_size_oblivious`` set while ``convert_model`` re-traces the graph.
* :func:`~._size_rules.size_arithmetic_rules` — conversion rules for the arithmetic on sizes the frontend lacks or
  truncates (``//``, ``%``, ``**``, ``sym_min``, comparisons...), given to ``openvino.convert_model`` inside the block.

* ``_op_rewrites``, ``_index_rewrites`` — operators the frontend lacks or mis-infers (``polar``, ``fft``, a
  ceil-mode pool with a kernel over its input; ``unfold``, ``cummax``, attention with ``enable_gqa``) rewritten as
  standard ops with the same numbers.

* :func:`root_logger_kept` — a failed ``convert_model`` left the root logger at ``ERROR`` (openvino 2026.4's
  ``convert.py`` restores it only on success).
* :func:`converted_without_retrace` — openvino 2026.4's frontend runs ``ExportedProgram.run_decompositions`` on every
  program, a second AOT trace of the whole model (openvinotoolkit/openvino#37626, dropped upstream in #38078): 19.0 s
  of a 43.1 s Qwen2.5-0.5B generation export. A program that writes no tensor is converted as it stands
  (:func:`~hub_export.patches.direct_lowering.direct_program`).

* :func:`low_precision_constants_held` — the torch tensors behind the frontend's bfloat16 and float8 constants
  collected inside the block; :func:`hold_constant_memory` then ties the ones the final model reads to it.

:func:`conversion_patches` applies all of them. :func:`stable_top_k` edits the converted model itself (``TopK``
made stable, as ONNX's rule), and so does :func:`~._size_rules.floor_mods_of_integers_as_mods`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

from ...patches._base import hold_memory, patch_attribute
from ...patches.direct_lowering import direct_program
from ...patches.graph import Inserter, edited_nodes, rewritten_nodes, views_after_permutes_as_reshapes
from ...patches.tracing import size_one_dims_stay_dynamic
from ._index_rewrites import index_rewrites
from ._op_rewrites import op_rewrites
from ._size_rules import floor_mods_of_integers_as_mods, size_arithmetic_extensions, size_arithmetic_rules

__all__ = [
    "conversion_patches",
    "converted_without_retrace",
    "copies_as_clones",
    "distinct_outputs",
    "floor_mods_of_integers_as_mods",
    "hold_constant_memory",
    "low_precision_constants_held",
    "pin_reshape_wildcards",
    "retrace_size_oblivious",
    "root_logger_kept",
    "size_arithmetic_extensions",
    "size_arithmetic_rules",
    "skip_empty_cat_inputs",
    "stable_top_k",
    "zero_fully_masked_attention_rows",
]


def _is_empty_1d(arg: Any) -> bool:
    value = getattr(arg, "meta", {}).get("val")
    shape = getattr(value, "shape", None)
    return shape is not None and len(shape) == 1 and isinstance(shape[0], int) and shape[0] == 0


#: ``rewrite(node) -> new args | None``: a node's replacement args inside :func:`_rewritten_args`.
_Rewrite = Callable[[Any], "tuple[Any, ...] | None"]


@contextlib.contextmanager
def _rewritten_args(program: Any, rewrite: _Rewrite) -> Iterator[int]:
    """Give every ``call_function`` node of ``program`` the args ``rewrite`` returns inside the block, then undo it
    (:func:`~hub_export.patches.graph.rewritten_nodes`).

    Yields:
        How many nodes were rewritten.
    """

    def as_attributes(node: Any) -> dict[str, Any] | None:
        args = rewrite(node)
        return None if args is None else {"args": args}

    with rewritten_nodes(program, as_attributes) as count:
        yield count


def _without_empty_cat_inputs(node: Any) -> tuple[Any, ...] | None:
    import torch

    if node.target is not torch.ops.aten.cat.default:
        return None
    tensors = list(node.args[0])
    kept = [t for t in tensors if not _is_empty_1d(t)]
    if not kept or len(kept) == len(tensors):
        return None
    return (kept, *node.args[1:])


def skip_empty_cat_inputs(program: Any) -> contextlib.AbstractContextManager[int]:
    """Drop 1-D empty tensors from ``aten.cat`` inputs while the block runs; restore the graph after.

    ATen's ``cat`` skips 1-D tensors of size 0 whatever ``dim`` is (``cat_should_skip_tensor``), and
    transformers' ``DynamicCache`` relies on it: a layer starts as ``torch.tensor([])`` and is concatenated
    with ``dim=-2``. OpenVINO's PyTorch frontend translates ``aten.cat`` to ``Concat`` without that rule and
    fails ("Axis -2 out of the tensor rank range [-1, 0]"); the same gap as pytorch/pytorch#185535 in
    Inductor's lowering. Dropping those inputs keeps the graph's semantics exactly.

    Yields:
        How many ``aten.cat`` nodes were rewritten.
    """
    return _rewritten_args(program, _without_empty_cat_inputs)


def _copy_as_clone(node: Any) -> dict[str, Any] | None:
    import torch

    if node.target is torch.ops.aten.cat.default and len(node.args[0]) == 1:
        return {"target": torch.ops.aten.clone.default, "args": (node.args[0][0],)}
    squeezes = (torch.ops.aten.squeeze.dims, torch.ops.aten.squeeze.dim)
    if node.target in squeezes and isinstance(node.args[0], torch.fx.Node):
        before, after = node.args[0].meta.get("val"), node.meta.get("val")
        if before is not None and after is not None and before.dim() == after.dim():
            return {"target": torch.ops.aten.clone.default, "args": (node.args[0],)}
    return None


def copies_as_clones(program: Any) -> contextlib.AbstractContextManager[int]:
    """Turn ``aten.cat`` of one tensor, and an ``aten.squeeze`` the trace found removing no axis, into
    ``aten.clone`` (the same values) while the block runs.

    Multimodal models concatenate their per-image features again (``torch.cat(pooler_output)``), one piece when
    :func:`~hub_export.patches.multimodal.features_kept_whole` kept them whole, and squeeze an axis that is a
    data-dependent size (the image patches a mask kept: ``squeeze(0)`` of ``(patches, hidden)`` removes nothing
    unless one patch is left, which the trace assumes away). OpenVINO's PyTorch frontend translates both to a
    ``Reshape``/``Squeeze`` that the CPU plugin refuses at run time ("the shape of input data (32.32) conflicts
    with the reshape pattern (32)").

    Yields:
        How many nodes were rewritten.
    """
    return rewritten_nodes(program, _copy_as_clone)


def _reshape_without_wildcard(node: Any) -> tuple[Any, ...] | None:
    import torch

    targets = {torch.ops.aten.view.default, torch.ops.aten.reshape.default, torch.ops.aten._unsafe_view.default}
    if node.target not in targets or len(node.args) < 2:
        return None
    sizes = list(node.args[1])
    value = node.meta.get("val")
    if -1 not in sizes or value is None or len(value.shape) != len(sizes):
        return None
    axis = sizes.index(-1)
    if not isinstance(value.shape[axis], int):
        return None
    sizes[axis] = int(value.shape[axis])
    return (node.args[0], sizes, *node.args[2:])


def pin_reshape_wildcards(program: Any) -> contextlib.AbstractContextManager[int]:
    """Replace a ``-1`` in ``view``/``reshape`` sizes by the static size it stands for, inside the block.

    ``convert_model`` re-runs ``ExportedProgram.run_decompositions``, which re-traces without the size-oblivious
    reasoning the export was traced with (0/1 specialization, pytorch/pytorch#106289; decompositions adding
    guards, pytorch/pytorch#175281). With a batch-1 sample, resolving a ``-1`` next to the symbolic batch comes
    out as ``4 // batch`` and a ``batch == 1`` guard: the converted graph then fails for any other batch. The
    static size recorded in the node's metadata is what ``-1`` means for every input, so writing it out keeps
    the graph's semantics and leaves nothing to infer.

    Yields:
        How many ``view``/``reshape`` nodes were rewritten.
    """
    return _rewritten_args(program, _reshape_without_wildcard)


def _sdpa_operands(node: Any) -> tuple[Any, Any, Any, Any] | None:
    """``(query, key, value, mask)`` of an ``aten.scaled_dot_product_attention`` node whose mask is a traced
    tensor with a known value, else None."""
    import torch

    if node.op != "call_function" or node.target is not torch.ops.aten.scaled_dot_product_attention.default:
        return None
    if len(node.args) < 3:
        return None
    mask = node.args[3] if len(node.args) > 3 else node.kwargs.get("attn_mask")
    if not isinstance(mask, torch.fx.Node) or mask.meta.get("val") is None:
        return None
    query, key, value = node.args[:3]
    if any(not isinstance(t, torch.fx.Node) or t.meta.get("val") is None for t in (key, value)):
        return None
    return query, key, value, mask


def _reads_a_cache_input(key: Any, inputs: set[str]) -> bool:
    """Whether ``key`` is (a view or GQA expansion of) a ``cat`` of a graph input: a past-cache concatenation, which
    OpenVINO's CPU plugin fuses with the cache state (``StatefulSDPAFusion``) only if it feeds the SDPA directly."""
    import torch

    aten = torch.ops.aten
    passthrough = {
        aten.expand.default,
        aten.reshape.default,
        aten.view.default,
        aten._unsafe_view.default,
        aten.unsqueeze.default,
        aten.clone.default,
        aten.slice.Tensor,
    }
    node: Any = key
    while isinstance(node, torch.fx.Node) and node.op == "call_function" and node.target in passthrough:
        node = node.args[0]
    if not isinstance(node, torch.fx.Node) or node.target is not aten.cat.default:
        return False
    parts: Any = node.args[0]
    return any(isinstance(t, torch.fx.Node) and t.op == "placeholder" and t.name in inputs for t in parts)


def zero_fully_masked_attention_rows(program: Any) -> contextlib.AbstractContextManager[int]:
    """Give each masked ``aten.scaled_dot_product_attention`` one more key, all zeros with a zero value, that only
    the query rows whose mask lets no key through may attend to; restore the graph after.

    ATen returns 0 for a query row whose mask is all False (``_safe_softmax``); OpenVINO's SDPA returns NaN
    (openvinotoolkit/openvino#31630, still in openvino 2026.4). Left padding with a causal mask makes such rows in
    every padded sequence, and the NaN then spreads to the whole batch entry through the next layer's attention.
    With the extra key such a row attends to the zero value alone, which gives ATen's 0 exactly; every other row
    has the extra key masked out (False, or -inf in a float mask), so its softmax is unchanged.

    The zeroing is deliberately *inside* the attention's inputs, not an op on its output: OpenVINO's CPU plugin
    (openvino 2026.4, f32 inference precision) computes wrong values, for every row, when an SDPA with dynamic
    shapes reads transposed ``[B, S, H, D]`` inputs, its output goes through a ``Select`` (``masked_fill``) and then
    the head transpose/reshape, and the head dim is over 64 (128: 3.9 max abs diff; 64, static shapes, or the SDPA
    output also a model output: exact). No upstream report was found. The earlier
    ``masked_fill(out, ~mask.any(-1), 0)`` formulation hit it on every real LLM (head dim 128: a one-layer Llama's
    logits off by 0.75 at scale 3).

    An attention whose key is a past-cache concatenation keeps its key and value as they are, so that the CPU plugin
    still fuses it with the cache state: such a row's mask lets every key through instead (finite, not ATen's 0).
    Those rows are padding queries; a generation export keeps the last position's logits and masks padded keys for
    every later query, so what it returns is unchanged.

    Yields:
        How many attention nodes were given the extra key.
    """
    import torch

    aten = torch.ops.aten
    inputs = set(program.graph_signature.user_inputs)

    def edit(node: Any, add: Inserter) -> dict[str, Any] | None:
        operands = _sdpa_operands(node)
        if operands is None:
            return None
        query, key, value, mask = operands
        is_bool = mask.meta["val"].dtype == torch.bool
        allowed = mask if is_bool else add(aten.ne.Scalar, mask, float("-inf"))
        blind = add(aten.logical_not.default, add(aten.any.dim, allowed, -1, True))  # rows that see no key
        if _reads_a_cache_input(key, inputs):  # the mask alone changes: such a row sees every key
            new_key, new_value = key, value
            if is_bool:
                new_mask = add(aten.logical_or.default, mask, blind)
            else:
                new_mask = add(aten.masked_fill.Scalar, mask, blind, 0.0)
        else:
            if is_bool:
                extra = blind
            else:  # 0 where the row sees no key, -inf elsewhere
                zero = add(aten.zeros_like.default, add(aten.slice.Tensor, mask, -1, 0, 1))
                extra = add(aten.masked_fill.Scalar, zero, add(aten.logical_not.default, blind), float("-inf"))
            new_mask = add(aten.cat.default, [mask, extra], -1)
            zero_key = add(aten.zeros_like.default, add(aten.slice.Tensor, key, -2, 0, 1))
            zero_value = add(aten.zeros_like.default, add(aten.slice.Tensor, value, -2, 0, 1))
            new_key = add(aten.cat.default, [key, zero_key], -2)
            new_value = add(aten.cat.default, [value, zero_value], -2)
        kwargs = {k: v for k, v in node.kwargs.items() if k != "attn_mask"}
        return {"args": (query, new_key, new_value, new_mask, *node.args[4:]), "kwargs": kwargs}

    # the top graph only (the cache inputs are its placeholders); the helper nodes carry their values in ``meta``
    return edited_nodes(program, edit, nested=False, record_values=True)


def stable_top_k(model: Any) -> int:
    """Make every value-sorted ``TopK`` of a converted ``openvino.Model`` stable (equal values in input order).

    The PyTorch frontend converts ``aten.topk`` (and ``sort``/``argsort``) to ``TopK`` without ``stable``, which
    leaves the order of equal values to the plugin: the CPU plugin returns them in an order of its own (indices 102,
    101, 100, 103 of four equal scores, where ONNX's TopK specifies the lower index first). A model that picks its
    top-k of scores that tie (DETR-style query selection over a tiny or saturated logit map) then gathers other rows
    than eager. A stable sort keeps the lower index first, ONNX's rule, and ATen's own for ``sort(stable=True)``;
    for other values the output is the same. Replaces ``TopK`` v1/v3/v11 by v11 with ``stable=True`` in place.

    Returns:
        How many ``TopK`` nodes were replaced.
    """
    import openvino.opset11 as ops

    count = 0
    for op in model.get_ordered_ops():
        if op.get_type_name() != "TopK":
            continue
        attributes = op.get_attributes()
        if attributes.get("sort") != "value" or attributes.get("stable"):
            continue
        stable = ops.topk(
            op.input_value(0),
            op.input_value(1),
            attributes["axis"],
            attributes["mode"],
            "value",
            attributes["index_element_type"],
            stable=True,
        )
        stable.set_friendly_name(op.get_friendly_name())
        for index in range(2):
            op.output(index).replace(stable.output(index))
        count += 1
    return count


@contextlib.contextmanager
def distinct_outputs(program: Any) -> Iterator[int]:
    """Return a tensor the program returns more than once through an identity of its own at each repeat (a
    product by one; ``logical_or`` with itself for booleans), inside the block; the graph and its signature are
    restored after.

    A model whose outputs share one tensor (a vision tower whose ``pooler_output`` is its ``last_hidden_state``,
    BLIP's and Cosmos-3 Edge's) exports a graph returning one node twice. OpenVINO's PyTorch frontend (openvino
    2026.4) fails on it ("Tensor name is not a number: getitem:0", ``translate_session.cpp``); a clone does not
    help, as the frontend's ``run_decompositions`` removes it. The identity gives exactly the same values; :func:`~hub_export.backends.openvino.exporter.OpenVINOExporter` then gives every output port its own
    name.

    Yields:
        How many outputs were given an identity op.
    """
    import torch
    from torch.export.graph_signature import OutputKind, TensorArgument

    graph = program.graph
    output = graph.output_node()
    old_args = output.args
    specs = [spec for spec in program.graph_signature.output_specs if spec.kind == OutputKind.USER_OUTPUT]
    values = list(output.args[0])
    # the user outputs come first among the graph's outputs after any mutated buffers, in signature order
    first = len(program.graph_signature.output_specs) - len(specs)
    seen: set[Any] = set()
    created: list[Any] = []
    renamed: list[tuple[Any, Any]] = []
    for offset, spec in enumerate(specs):
        value = values[first + offset]
        if not isinstance(value, torch.fx.Node) or not isinstance(spec.arg, TensorArgument) or value not in seen:
            seen.add(value)
            continue
        val = value.meta.get("val")
        with graph.inserting_before(output):  # a product by one: decompositions drop a clone or an alias
            if val is not None and val.dtype == torch.bool:
                clone = graph.call_function(torch.ops.aten.logical_or.default, (value, value))
            else:
                clone = graph.call_function(torch.ops.aten.mul.Scalar, (value, 1))
        clone.meta.update({k: v for k, v in value.meta.items() if k in ("val", "tensor_meta", "stack_trace")})
        values[first + offset] = clone
        created.append(clone)
        renamed.append((spec, spec.arg))
        spec.arg = TensorArgument(name=clone.name)
    if created:
        output.args = (tuple(values), *old_args[1:])
        program.graph_module.recompile()
    try:
        yield len(created)
    finally:
        if created:
            output.args = old_args
            for spec, arg in renamed:
                spec.arg = arg
            for clone in reversed(created):
                graph.erase_node(clone)
            program.graph_module.recompile()


def retrace_size_oblivious() -> contextlib.AbstractContextManager[None]:
    """Re-trace with ``backed_size_oblivious``, as the export was traced, while the block runs.

    ``convert_model`` re-runs ``ExportedProgram.run_decompositions``, which re-traces the graph and evaluates the
    metadata checks of every node (``is_contiguous``: ``numel() < 2``) with each symbol's sample value as its hint,
    adding a guard each time (decompositions adding guards, pytorch/pytorch#175281). Two of them can narrow a dim's
    range to one value, which then replaces the symbol in the whole graph: with 2 images in the sample,
    ``images > 1`` and ``images - 1 < 2`` (the metadata of a tensor of ``images - 1`` elements) made the image count the
    constant 2, and OpenVINO computed wrong numbers for 3 images (guards are not checked at run time). The export
    itself traced those dims size-obliviously (:func:`~hub_export.patches.tracing.size_one_dims_stay_dynamic`);
    the re-trace then decides such checks without guarding, so the converted graph stays general.
    """
    return size_one_dims_stay_dynamic()


@contextlib.contextmanager
def root_logger_kept() -> Iterator[None]:
    """Restore the root logger's level, filters and handlers after the block, whatever happens in it.

    openvino 2026.4's ``convert_model`` (``openvino/tools/ovc/convert.py``) sets the root logger to ``ERROR`` with a
    filter and a handler of its own (``init_logger``) and restores it after ``_convert`` returns, not when it raises:
    each failed conversion left the process's logging at ``ERROR``, silencing every library's warnings after it
    (a conversion without the re-trace that fails is retried, so such failures are part of a normal export). The
    state is read and restored with OpenVINO's own ``get_logger_state`` / ``restore_logger_state``.
    """
    from openvino.tools.ovc.logger import get_logger_state, restore_logger_state

    state = get_logger_state()
    try:
        yield
    finally:
        restore_logger_state(state)


@contextlib.contextmanager
def conversion_patches(program: Any) -> Iterator[None]:
    """Every workaround needed while ``openvino.convert_model`` reads ``program``."""
    with (
        root_logger_kept(),
        retrace_size_oblivious(),
        op_rewrites(program),
        index_rewrites(program),
        skip_empty_cat_inputs(program),
        copies_as_clones(program),
        pin_reshape_wildcards(program),
        views_after_permutes_as_reshapes(program),
        size_arithmetic_rules(),
        zero_fully_masked_attention_rows(program),
        distinct_outputs(program),
    ):
        yield


@contextlib.contextmanager
def converted_without_retrace(direct: list[bool]) -> Iterator[None]:
    """Let ``openvino.convert_model`` read the traced program itself, instead of ``run_decompositions``'s re-trace of
    it, where :func:`~hub_export.patches.direct_lowering.direct_program` allows (nothing written in place).

    openvino 2026.4 lists no operators its PyTorch frontend translates, so any operator is tried, with
    ``aten.reshape`` given as ``aten.view`` (the frontend has no rule for ``reshape``; in a graph that writes nothing
    the two hold the same values). ``direct`` gets a True for each program converted so: when the conversion
    fails (an operator without a rule, which the re-trace would have decomposed), the caller converts again
    through the re-trace.
    """
    import torch
    from openvino.frontend.pytorch import fx_decoder

    decoder = fx_decoder.TorchFXPythonDecoder
    original = decoder.from_exported_program
    renames = {torch.ops.aten.reshape.default: torch.ops.aten.view.default}

    def from_exported_program(cls: Any, program: Any, dynamic_shapes: bool = True, op_type_mapping: Any = None) -> Any:
        lowered = direct_program(program, lambda op: True, renames)
        if lowered is None:
            return original(program, dynamic_shapes=dynamic_shapes, op_type_mapping=op_type_mapping)
        direct.append(True)
        return cls(lowered.module(), dynamic_shapes=dynamic_shapes, op_type_mapping=op_type_mapping)

    with patch_attribute(
        decoder,
        "from_exported_program",
        classmethod(from_exported_program),
        reason="the re-trace of run_decompositions in openvino 2026.4's frontend (openvinotoolkit/openvino#37626)",
    ):
        yield


@contextlib.contextmanager
def low_precision_constants_held(held: list[Any]) -> Iterator[None]:
    """Collect in ``held`` every torch tensor the PyTorch frontend makes a bfloat16 or float8 ``Constant`` of.

    openvino 2026.4's ``torch_tensor_to_ov_const`` (``openvino/frontend/pytorch/utils.py``) builds such a constant
    on an ``openvino.Tensor`` over the torch tensor's memory, and nothing keeps that memory alive (a float32
    constant is built from the numpy array, which the constant holds). When the tensor is one the ExportedProgram
    owned (a lifted buffer such as a rotary ``inv_freq``), the constant reads freed memory once the program is
    gone: measured, a 4-element bfloat16 constant read back as 1.8e30, and a bfloat16 export generated token 0
    from NaN logits. :func:`hold_constant_memory` keeps the tensors the final model still reads.
    """
    import torch
    from openvino.frontend.pytorch import fx_decoder

    low = {torch.bfloat16, torch.float8_e4m3fn, torch.float8_e5m2}
    original = fx_decoder.torch_tensor_to_ov_const

    def holding(torch_t: Any, shared_memory: bool = True) -> Any:
        if shared_memory and getattr(torch_t, "dtype", None) in low:
            torch_t = torch_t.contiguous()  # the copy the constant reads, when the tensor was not contiguous
            held.append(torch_t)
        return original(torch_t, shared_memory=shared_memory)

    fx_decoder.torch_tensor_to_ov_const = holding
    try:
        yield
    finally:
        fx_decoder.torch_tensor_to_ov_const = original


def hold_constant_memory(model: Any, held: list[Any]) -> int:
    """Tie to ``model`` the tensors of ``held`` (:func:`low_precision_constants_held`) whose memory one of its
    constants reads, so they live as long as the model; returns how many. Tensors no constant reads any more (a
    weight NNCF replaced with its int4 version) are let go."""
    read = {
        op.get_data().ctypes.data
        for op in model.get_ordered_ops()
        if op.get_type_name() == "Constant"
        and op.get_output_element_type(0).get_type_name() in ("bf16", "f8e4m3", "f8e5m2")
    }
    kept = [tensor for tensor in held if tensor.data_ptr() in read]
    hold_memory(model, kept)
    return len(kept)
