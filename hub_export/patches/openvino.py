"""Workarounds applied while OpenVINO converts an ExportedProgram; each is reversible and names its bug."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

__all__ = ["conversion_patches", "pin_reshape_wildcards", "skip_empty_cat_inputs", "zero_fully_masked_attention_rows"]


def _is_empty_1d(arg: Any) -> bool:
    value = getattr(arg, "meta", {}).get("val")
    shape = getattr(value, "shape", None)
    return shape is not None and len(shape) == 1 and isinstance(shape[0], int) and shape[0] == 0


@contextlib.contextmanager
def skip_empty_cat_inputs(program: Any) -> Iterator[int]:
    """Drop 1-D empty tensors from ``aten.cat`` inputs while the block runs; restore the graph after.

    ATen's ``cat`` skips 1-D tensors of size 0 whatever ``dim`` is (``cat_should_skip_tensor``), and
    transformers' ``DynamicCache`` relies on it: a layer starts as ``torch.tensor([])`` and is concatenated
    with ``dim=-2``. OpenVINO's PyTorch frontend translates ``aten.cat`` to ``Concat`` without that rule and
    fails ("Axis -2 out of the tensor rank range [-1, 0]"); the same gap as pytorch/pytorch#185535 in
    Inductor's lowering. Dropping those inputs keeps the graph's semantics exactly.

    Yields:
        How many ``aten.cat`` nodes were rewritten.
    """
    import torch

    graph_module = program.graph_module
    changed: list[tuple[Any, tuple[Any, ...]]] = []
    for node in program.graph.nodes:
        if node.op != "call_function" or node.target is not torch.ops.aten.cat.default:
            continue
        tensors = list(node.args[0])
        kept = [t for t in tensors if not _is_empty_1d(t)]
        if kept and len(kept) != len(tensors):
            changed.append((node, node.args))
            node.args = (kept, *node.args[1:])
    if changed:
        graph_module.recompile()
    try:
        yield len(changed)
    finally:
        if changed:
            for node, args in changed:
                node.args = args
            graph_module.recompile()


@contextlib.contextmanager
def pin_reshape_wildcards(program: Any) -> Iterator[int]:
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
    import torch

    targets = {torch.ops.aten.view.default, torch.ops.aten.reshape.default, torch.ops.aten._unsafe_view.default}
    graph_module = program.graph_module
    changed: list[tuple[Any, tuple[Any, ...]]] = []
    for node in program.graph.nodes:
        if node.op != "call_function" or node.target not in targets or len(node.args) < 2:
            continue
        sizes = list(node.args[1])
        value = node.meta.get("val")
        if -1 not in sizes or value is None or len(value.shape) != len(sizes):
            continue
        axis = sizes.index(-1)
        if isinstance(value.shape[axis], int):
            sizes[axis] = int(value.shape[axis])
            changed.append((node, node.args))
            node.args = (node.args[0], sizes, *node.args[2:])
    if changed:
        graph_module.recompile()
    try:
        yield len(changed)
    finally:
        if changed:
            for node, args in changed:
                node.args = args
            graph_module.recompile()


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
        pin_reshape_wildcards(program),
        zero_fully_masked_attention_rows(program),
    ):
        yield
