"""Graph rewrites shared by the formats that re-run ``ExportedProgram.run_decompositions`` while lowering.

Each is reversible: it edits the program's nodes inside a ``with`` block and restores them in ``finally``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

__all__ = ["NodeRewrite", "all_true_checks_as_all", "rewritten_nodes", "views_after_permutes_as_reshapes"]

#: ``rewrite(node) -> {attribute: new value} | None``: what :func:`rewritten_nodes` sets on a node (``target``,
#: ``args``), or None to leave it.
NodeRewrite = Callable[[Any], "dict[str, Any] | None"]


def _is_mutating(node: Any) -> bool:
    """True for an operator writing a tensor's values (``detach_`` only changes autograd metadata)."""
    schema = getattr(node.target, "_schema", None)
    return bool(schema is not None and schema.is_mutable and schema.name != "aten::detach_")


@contextlib.contextmanager
def rewritten_nodes(program: Any, rewrite: NodeRewrite) -> Iterator[int]:
    """Set the attributes ``rewrite`` returns on every ``call_function`` node of ``program`` inside the block,
    then restore the old values. Nodes of nested graphs count too: a region the model runs under
    ``torch.no_grad()`` or ``autocast`` is traced as a higher-order operator whose body is a submodule
    (``wrap_with_set_grad_enabled``), which ``run_decompositions`` inlines. Each graph module that changed is
    recompiled after the rewrite and after the restore (in ``finally``).

    Yields:
        How many nodes were rewritten.
    """
    import torch

    changed: list[tuple[Any, dict[str, Any]]] = []
    modules = []
    for module in program.graph_module.modules():
        if not isinstance(module, torch.fx.GraphModule):
            continue
        before = len(changed)
        for node in module.graph.nodes:
            new = rewrite(node) if node.op == "call_function" else None
            if new:
                changed.append((node, {name: getattr(node, name) for name in new}))
                for name, value in new.items():
                    setattr(node, name, value)
        if len(changed) > before:
            modules.append(module)
            module.recompile()
    try:
        yield len(changed)
    finally:
        for node, old in reversed(changed):
            for name, value in old.items():
                setattr(node, name, value)
        for module in modules:
            module.recompile()


@contextlib.contextmanager
def views_after_permutes_as_reshapes(program: Any) -> Iterator[int]:
    """Turn ``aten.view`` of a transposed/permuted tensor into ``aten.reshape`` inside the block, then undo it.

    Tracing records ``output.transpose(1, 2).view(batch, seq, -1)`` as a view when the traced kernel (CPU
    ``scaled_dot_product_attention``) returns its output in a layout that makes the transpose contiguous (its
    ``.contiguous()`` then traces to nothing). ``run_decompositions`` replaces that kernel by math whose output has
    the default layout, and the recorded view of the transposed tensor fails ("Cannot view a tensor with shape
    ... and strides ...": pytorch/pytorch#141107, #136543). A reshape is the same values whatever the layout
    (a view where one is possible, else a copy), so the rewrite keeps the graph's semantics; it is applied only to
    graphs without in-place operations, where no later write could tell a copy from a view.

    Yields:
        How many ``view`` nodes were rewritten.
    """
    import torch

    graphs = [m.graph for m in program.graph_module.modules() if isinstance(m, torch.fx.GraphModule)]
    calls = [n for graph in graphs for n in graph.nodes if n.op == "call_function"]
    permutes = {torch.ops.aten.transpose.int, torch.ops.aten.permute.default}

    def as_reshape(node: Any) -> dict[str, Any] | None:
        source = node.args[0] if node.args else None
        if node.target is torch.ops.aten.view.default and getattr(source, "target", None) in permutes:
            return {"target": torch.ops.aten.reshape.default}
        return None

    mutating = any(_is_mutating(n) for n in calls)
    with rewritten_nodes(program, (lambda node: None) if mutating else as_reshape) as count:
        yield count


def all_true_checks_as_all(program: Any) -> contextlib.AbstractContextManager[int]:
    """Turn ``aten._is_all_true`` into ``aten.all`` (the same 0-dim bool) inside the block, then undo it.

    ``torch._check`` on a tensor condition (transformers' ``torch_compilable_check``, e.g. the placeholder count of
    LLaVA-NeXT's and Aya Vision's ``get_placeholder_mask``) traces to ``aten._assert_async(aten._is_all_true(cond))``.
    ``_is_all_true`` is not in the core ATen opset: the ONNX exporter has no function for it ("No ONNX function
    found for aten._is_all_true") and ExecuTorch's ``to_edge`` refuses it (``SpecViolationError``). ``aten.all`` of
    the same boolean tensor is its definition.

    Yields:
        How many nodes were rewritten.
    """
    import torch

    def as_all(node: Any) -> dict[str, Any] | None:
        if node.target is torch.ops.aten._is_all_true.default:
            return {"target": torch.ops.aten.all.default}
        return None

    return rewritten_nodes(program, as_all)
