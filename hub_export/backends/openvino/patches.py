"""Workarounds applied while OpenVINO converts an ExportedProgram; each is reversible and names its bug.

* :func:`skip_empty_cat_inputs`, :func:`pin_reshape_wildcards` — node args rewritten inside the block
  (:func:`_rewritten_args`), restored after.
* :func:`zero_fully_masked_attention_rows` — nodes added after each masked attention, removed after.
* :func:`size_arithmetic_rules` — conversion rules for ``//``, ``%``, ``sym_min``/``sym_max`` on sizes, given to
  ``openvino.convert_model`` inside the block.

:func:`conversion_patches` applies all of them.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

from ...patches import patch_attribute
from ...patches.graph import rewritten_nodes, views_after_permutes_as_reshapes

__all__ = [
    "conversion_patches",
    "copies_as_clones",
    "pin_reshape_wildcards",
    "size_arithmetic_extensions",
    "size_arithmetic_rules",
    "skip_empty_cat_inputs",
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


def _int_operands(context: Any) -> tuple[Any, Any]:
    import openvino.opset13 as ops

    left, right = context.get_input(0), context.get_input(1)
    if right.get_element_type() != left.get_element_type():
        right = ops.convert_like(right, left).output(0)
    return left, right


def _floordiv(context: Any) -> list[Any]:
    import openvino.opset13 as ops

    left, right = _int_operands(context)  # (a - a mod b) / b is exact, so no rounding mode is involved
    return [ops.divide(ops.subtract(left, ops.floor_mod(left, right)), right).output(0)]


def _floor_divide(context: Any) -> list[Any]:
    import openvino.opset13 as ops

    left, right = _int_operands(context)
    if left.get_element_type().is_integral():  # the same exact form as a size's floor division
        return [ops.divide(ops.subtract(left, ops.floor_mod(left, right)), right).output(0)]
    return [ops.floor(ops.divide(left, right)).output(0)]


def _divide_mode(context: Any) -> list[Any]:
    import openvino.opset13 as ops

    mode = context.get_attribute("rounding_mode") if context.has_attribute("rounding_mode") else None
    if mode == "floor":
        return _floor_divide(context)
    left, right = _int_operands(context)
    if mode is None:  # true division: floating (the default float32) for integers, as torch's
        if left.get_element_type().is_integral():
            left, right = ops.convert(left, "f32").output(0), ops.convert(right, "f32").output(0)
        return [ops.divide(left, ops.convert_like(right, left)).output(0)]
    if left.get_element_type().is_integral():  # trunc: integer Divide truncates
        return [ops.divide(left, right).output(0)]
    quotient = ops.divide(left, right)
    return [ops.multiply(ops.sign(quotient), ops.floor(ops.abs(quotient))).output(0)]


def _mod(context: Any) -> list[Any]:
    import openvino.opset13 as ops

    return [ops.floor_mod(*_int_operands(context)).output(0)]


def _sym_min(context: Any) -> list[Any]:
    import openvino.opset13 as ops

    return [ops.minimum(*_int_operands(context)).output(0)]


def _sym_max(context: Any) -> list[Any]:
    import openvino.opset13 as ops

    return [ops.maximum(*_int_operands(context)).output(0)]


def size_arithmetic_extensions() -> list[Any]:
    """OpenVINO ``ConversionExtension`` rules for the size arithmetic its PyTorch frontend gets wrong or lacks.

    The frontend names a Python-level node by ``str(target)``: ``<built-in function mod>``, ``<function sym_min
    at 0x...>`` (hence the rules are built per process from the live functions).

    * ``operator.floordiv``: the built-in rule truncates toward zero at run time (``-5 // 4`` gives -1, Python -2:
      the CPU and GPU plugins ignore ``Divide``'s python-division flag for integers, openvinotoolkit/openvino#38248,
      fix proposed in openvinotoolkit/openvino#38260). Ceil divisions written ``-(-n // k)`` by decompositions
      (Mamba-2's chunk count) then come out one short and a later reshape fails at run time. The rule here is
      ``(a - a mod b) / b``: ``FloorMod`` has Python's sign rule and the division is exact, so no rounding is left.
    * ``operator.mod``, ``torch.sym_min``, ``torch.sym_max``: no rule at all (openvino 2026.4: "No conversion rule
      found for operations: <built-in function mod>, <function sym_min ...>"). Window and chunk padding traced
      with dynamic sizes emits them: Swin's ``(window - width % window) % window`` and ``min(height, width)``,
      Mamba-2's ``seq_len % chunk_size``. They map to ``FloorMod`` (Python's sign rule), ``Minimum``, ``Maximum``.
    * ``aten.floor_divide.default`` and ``aten.div.Tensor_mode`` (``rounding_mode="floor"``, what ``//`` of tensors
      exports to) of integer tensors: the same truncation at run time (``(x - 1) // 2`` of 0
      gives 0, torch -1); the Qwen3 audio encoders' frame counts of an empty remainder come out one long. The same
      exact form for integers; ``Floor(Divide)`` for floating tensors.
    """
    import operator

    import torch
    from openvino.frontend.pytorch import ConversionExtension

    rules = {operator.floordiv: _floordiv, operator.mod: _mod, torch.sym_min: _sym_min, torch.sym_max: _sym_max}
    extensions = [ConversionExtension(str(target), rule) for target, rule in rules.items()]
    extensions.append(ConversionExtension("aten.floor_divide.default", _floor_divide))
    return [*extensions, ConversionExtension("aten.div.Tensor_mode", _divide_mode)]


@contextlib.contextmanager
def size_arithmetic_rules() -> Iterator[None]:
    """Give ``openvino.convert_model`` the rules of :func:`size_arithmetic_extensions` inside the block.

    ``convert_model`` takes extensions per call; the patch appends these to the caller's own ``extension``.
    """
    import openvino

    original = openvino.convert_model

    def convert_model(*args: Any, extension: Any = None, **kwargs: Any) -> Any:
        given = [] if extension is None else list(extension) if isinstance(extension, (list, tuple)) else [extension]
        return original(*args, extension=[*given, *size_arithmetic_extensions()], **kwargs)

    reason = "size arithmetic rules missing or truncating in OpenVINO's PyTorch frontend (openvino 2026.4)"
    with patch_attribute(openvino, "convert_model", convert_model, reason=reason):
        yield


def _fake_value(target: Any, args: tuple[Any, ...]) -> Any:
    """The output metadata of ``target(*args)`` computed on the inputs' fake tensors (None if unknown)."""
    import torch
    from torch._guards import detect_fake_mode

    values = [a.meta.get("val") if isinstance(a, torch.fx.Node) else a for a in args]
    mode = detect_fake_mode([v for v in values if isinstance(v, torch.Tensor)])
    if mode is None:
        return None
    with mode:
        return target(*values)


@contextlib.contextmanager
def zero_fully_masked_attention_rows(program: Any) -> Iterator[int]:
    """Zero the output rows of ``aten.scaled_dot_product_attention`` whose mask lets no key through.

    ATen returns 0 for a query row whose mask is all False (``_safe_softmax``); OpenVINO's SDPA returns NaN
    (openvinotoolkit/openvino#31630). Left padding with a causal mask makes such rows in every padded
    sequence, and the NaN then spreads to the whole batch entry through the next layer's attention. A
    ``masked_fill(out, ~mask.any(-1), 0)`` after each masked attention gives ATen's result exactly.

    Yields:
        How many attention nodes were wrapped.
    """
    import torch

    aten = torch.ops.aten
    graph = program.graph
    added: list[tuple[Any, list[Any]]] = []
    for node in list(graph.nodes):
        if node.op != "call_function" or node.target is not aten.scaled_dot_product_attention.default:
            continue
        mask = node.args[3] if len(node.args) > 3 else node.kwargs.get("attn_mask")
        value = getattr(mask, "meta", {}).get("val")
        if not isinstance(mask, torch.fx.Node) or value is None:
            continue
        steps: list[tuple[Any, tuple[Any, ...]]] = []
        if value.dtype != torch.bool:
            steps.append((aten.ne.Scalar, (mask, float("-inf"))))
        steps += [
            (aten.any.dim, (None, -1, True)),  # None: the previous step's node
            (aten.logical_not.default, (None,)),
            (aten.masked_fill.Scalar, (node, None, 0.0)),
        ]
        created: list[Any] = []
        previous = mask
        with graph.inserting_before(node.next):  # each new node lands after the previous one
            for target, args in steps:
                args = tuple(previous if a is None else a for a in args)
                new = graph.call_function(target, args)
                new.meta["val"] = _fake_value(target, args)
                created.append(new)
                previous = new
        fill = previous
        node.replace_all_uses_with(fill, delete_user_cb=lambda user, fill=fill: user is not fill)
        added.append((node, created))
    if added:
        program.graph_module.recompile()
    try:
        yield len(added)
    finally:
        if added:
            for node, created in added:
                created[-1].replace_all_uses_with(node)
                for new in reversed(created):
                    graph.erase_node(new)
            program.graph_module.recompile()


@contextlib.contextmanager
def conversion_patches(program: Any) -> Iterator[None]:
    """Every workaround needed while ``openvino.convert_model`` reads ``program``."""
    with (
        skip_empty_cat_inputs(program),
        copies_as_clones(program),
        pin_reshape_wildcards(program),
        views_after_permutes_as_reshapes(program),
        size_arithmetic_rules(),
        zero_fully_masked_attention_rows(program),
    ):
        yield
