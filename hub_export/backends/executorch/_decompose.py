"""XNNPACK's partitioner, asking ``to_edge_transform_and_lower`` for one decomposition table instead of two.

``to_edge_transform_and_lower`` (executorch 1.5.1, ``exir/program/_program.py``) decomposes a program to the core
ATen opset while keeping whole the ops a partitioner lowers itself (``linear``, ``upsample_bilinear2d``, ...). For a
partitioner whose ``ops_to_not_decompose`` returns a per-node check (XNNPACK's: can the delegate take this node?),
it re-traces the whole program three times (``run_decompositions``): to functionalize it, to decompose every other
op, and, once the nodes the check accepts are renamed out of the way, to decompose the nodes it refuses. For one
that returns no check it re-traces twice (the third only existed for refused nodes), and then refuses any kept op
that the partitioner did not take after all ("was not decomposed or delegated").

:func:`one_table_partitioner` is XNNPACK's partitioner returning no check: each re-trace of a model costs as much as
tracing it (40% of a tiny Llama's lowering went to the three), so this saves a third of that. Where every kept node is
delegated, the program is the one the three re-traces give (the third decomposes nothing); where XNNPACK refuses one,
the lowering fails ("was not decomposed or delegated": :func:`is_kept_node_refused`) and
:func:`.exporter._to_edge` lowers again with XNNPACK's own partitioner, node by node; any other failure is the
lowering's own and is raised at once.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["is_kept_node_refused", "one_table_partitioner", "unbacked_symbols_restorer"]


def one_table_partitioner() -> Any:
    """An ``XnnpackPartitioner`` whose ``ops_to_not_decompose`` returns its ops and no per-node check."""
    import torch
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner

    from .patches import is_tanh_gelu

    class OneTableXnnpackPartitioner(XnnpackPartitioner):
        def ops_to_not_decompose(self, ep: Any) -> tuple[list[Any], None]:
            ops, _ = super().ops_to_not_decompose(ep)
            if any(is_tanh_gelu(node) for node in ep.graph.nodes):  # XNNPACK takes only the exact one: decompose
                ops = [op for op in ops if op is not torch.ops.aten.gelu.default]
            return ops, None

    return OneTableXnnpackPartitioner()


def is_kept_node_refused(exc: BaseException) -> bool:
    """Whether ``exc`` is ``to_edge_transform_and_lower``'s refusal of a node kept whole that no partitioner took
    (executorch 1.5.1, ``_sanity_check_graph_for_non_decomp_ops``: a ``RuntimeError`` "Node ... with op ... was not
    decomposed or delegated"): the one failure XNNPACK's node-by-node choice can avoid, by decomposing that node."""
    return isinstance(exc, RuntimeError) and "was not decomposed or delegated" in str(exc)


def unbacked_symbols_restorer(program: Any) -> Callable[[], None]:
    """A function that puts back the pending unbacked symbols of ``program``'s ShapeEnv as they were on entry.

    A lowering that fails half-way through ``run_decompositions`` leaves the data-dependent sizes it created while
    re-tracing (``nonzero``, ``.item()``, an ``arange`` of a counted length: Idefics3's patch buckets in Aria) pending
    in the ShapeEnv the program's fake tensors share; the next re-trace of the same program then fails on the first
    node it tracks ("PendingUnbackedSymbolNotFound: Pending unbacked symbols {u6, ...} not in returned outputs",
    torch 2.13). Restoring the list before lowering again gives the second lowering the state the first one had.
    """
    import torch
    from torch._guards import detect_fake_mode

    values = [node.meta.get("val") for node in program.graph.nodes if node.op == "placeholder"]
    mode = detect_fake_mode([value for value in values if isinstance(value, torch.Tensor)])
    env = getattr(mode, "shape_env", None)
    pending = list(env.pending_fresh_unbacked_symbols) if env is not None else []

    def restore() -> None:
        if env is not None:
            env.pending_fresh_unbacked_symbols[:] = pending

    return restore
