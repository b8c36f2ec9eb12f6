"""XNNPACK's passes re-trace a partition only where they changed it (a reversible patch of its pass manager).

ExecuTorch 1.5.1 lowers each XNNPACK partition through ``XNNPACKPassManager.transform``
(``backends/xnnpack/_passes/__init__.py``): 17 passes in a row. Most of them edit the graph in their own ``call`` and
then end with ``super().call(graph_module)``, ``ExportPass.call``, which traces the whole partition again on fake
tensors to refresh its metadata, whether the pass changed anything or not. Most passes look for ops that a given
partition does not hold (batch norms, 1-D convolutions, PReLU, upsampling, long concatenations...), so most of these
re-traces rebuild the graph they were given; under dynamic shapes each costs as much as tracing the partition again
(sympy arithmetic for every size of every node). A two-layer Llama's export (dynamic shapes) ran ``ExportPass.call``'s
re-trace 428 times, 8.4 s of its 30.2 s; with this patch 63 times, 5.3 s of 25.6 s; Qwen2.5-0.5B's config at full depth
311 s -> 265 s (``benchmarks/executorch_retrace.py``, ``benchmarks/results/executorch-retrace.txt``). No upstream
issue is known to us.

:func:`xnnpack_passes_retrace_changed_graphs` wraps each pass of the list whose only work is its own ``call`` (it
overrides none of the re-trace's hooks: ``call_operator``, ``placeholder``, ``output``...): the partition's graphs are
recorded when the pass starts, and its closing ``ExportPass.call`` re-traces only when they differ (a node added,
removed, retargeted or given other arguments, in the graph or in a graph nested in it); otherwise it returns the graph
as it is. Passes that do their work inside the re-trace (``ConstPropPass``, ``DimOrderOpsRevertPass``) run as before.
The lowered programs are the same bytes (``tests/test_executorch_lowering.py`` compares them on a stack of
convolutions; the benchmark on decoders, encoders, vision, audio, quantized and generation exports).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from ...patches import patch_attribute

__all__ = ["xnnpack_passes_retrace_changed_graphs"]

#: The attribute of a wrapped pass holding its partition's graphs as they were when the pass started.
_AT_START = "_hub_export_graphs_at_start"


def graphs_of(graph_module: Any) -> tuple[Any, ...]:
    """What of ``graph_module``'s graphs (its own and every nested one) a pass can change: each node's kind, name,
    target and arguments (other nodes by name, tensors by identity)."""
    import torch
    from torch.fx.node import map_aggregate

    def plain(value: Any) -> Any:
        if isinstance(value, torch.fx.Node):
            return ("node", value.name)
        if isinstance(value, torch.Tensor):
            return ("tensor", id(value), tuple(value.shape), value.dtype)
        return value

    return tuple(
        (
            path,
            node.op,
            node.name,
            str(node.target),
            repr(map_aggregate(node.args, plain)),
            repr(map_aggregate(node.kwargs, plain)),
        )
        for path, module in graph_module.named_modules()
        if isinstance(module, torch.fx.GraphModule)
        for node in module.graph.nodes
    )


def _edits_before_retracing(pass_class: Any, export_pass: Any) -> bool:
    """Whether ``pass_class`` does its work in its own ``call``, before the re-trace, and none inside it."""
    if not (isinstance(pass_class, type) and issubclass(pass_class, export_pass)):
        return False
    above = pass_class.__mro__[: pass_class.__mro__.index(export_pass)]
    if not any("call" in vars(cls) for cls in above):
        return False
    # the re-trace's hooks: the methods ExportPass and its bases define, past ``object`` (``__init_subclass__`` and
    # the like are no hooks) and besides ``call`` (the pass's own work) and ``__init__``
    hooks = {
        name
        for cls in export_pass.__mro__
        if cls.__module__ != "builtins" and cls.__module__ != "abc"
        for name, value in vars(cls).items()
        if callable(value)
    }
    hooks -= {"call", "__init__"}
    return not any(name in vars(cls) for cls in above for name in hooks)


def _recording_its_start(pass_class: Any) -> Any:
    """A subclass of ``pass_class`` that records its partition's graphs when its ``call`` starts."""

    def call(self: Any, graph_module: Any) -> Any:
        setattr(self, _AT_START, graphs_of(graph_module))
        try:
            return pass_class.call(self, graph_module)
        finally:
            delattr(self, _AT_START)

    return type(pass_class.__name__, (pass_class,), {"call": call, "__module__": pass_class.__module__})


@contextlib.contextmanager
def xnnpack_passes_retrace_changed_graphs() -> Iterator[None]:
    """Inside the block, XNNPACK's passes re-trace a partition only where they changed it (see the module)."""
    from executorch.backends.xnnpack._passes import XNNPACKPassManager
    from executorch.exir.pass_base import ExportPass
    from torch.fx.passes.infra.pass_base import PassResult

    retrace = ExportPass.call
    transform = XNNPACKPassManager.transform

    def call(self: Any, graph_module: Any) -> Any:
        at_start = vars(self).get(_AT_START)
        if at_start is not None and graphs_of(graph_module) == at_start:
            return PassResult(graph_module, False)
        return retrace(self, graph_module)

    def wrapped_transform(self: Any) -> Any:
        passes = self.passes
        self.passes = [_recording_its_start(p) if _edits_before_retracing(p, ExportPass) else p for p in passes]
        try:
            return transform(self)
        finally:
            self.passes = passes

    reason = "XNNPACK's passes re-tracing every partition after each pass, changed or not (executorch 1.5.1)"
    with (
        patch_attribute(ExportPass, "call", call, reason=reason),
        patch_attribute(XNNPACKPassManager, "transform", wrapped_transform, reason=reason),
    ):
        yield
