"""Workarounds applied while OpenVINO converts an ExportedProgram; each is reversible and names its bug."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

__all__ = ["conversion_patches", "skip_empty_cat_inputs"]


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
def conversion_patches(program: Any) -> Iterator[None]:
    """Every workaround needed while ``openvino.convert_model`` reads ``program``."""
    with skip_empty_cat_inputs(program):
        yield
