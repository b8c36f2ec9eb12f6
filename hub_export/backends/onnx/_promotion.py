"""Whether torch.onnx's type-promotion pass would change a graph, read from the values the trace recorded.

``torch.onnx.export`` runs ``InsertTypePromotion`` on every program: an interpreter that executes each node again
on fake tensors and, where an elementwise op's inputs differ from the dtype its promotion rule computes, inserts a
cast (then runs the node again). On Qwen2.5-0.5B's decode graph it ran 5 s and inserted nothing. The decision the
pass makes for a node depends only on its inputs' dtypes (``rule.preview_type_promotion``), which each input's
``meta["val"]`` already holds, so :func:`promotion_needed` makes it for every node without executing any; where
it cannot tell (a value without a recorded dtype, an argument of another kind) it answers True, and the pass runs.
"""

from __future__ import annotations

from typing import Any

__all__ = ["promotion_needed"]


def _changes(value: Any, dtype: Any) -> bool | None:
    """Whether the pass would cast ``value`` (an argument's recorded value) to ``dtype``; None when unknown."""
    import torch
    from torch.onnx._internal.fx import type_utils

    if dtype is None:
        return False
    if isinstance(value, torch.Tensor):
        return value.dtype != dtype
    if isinstance(value, (list, tuple)):
        answers = [_changes(item, dtype) for item in value]
        return None if None in answers else any(answers)
    if isinstance(value, (bool, int, float, complex, torch.SymInt, torch.SymFloat, torch.SymBool)):
        equivalent = type_utils.from_scalar_type_to_torch_dtype(type(value))
        return None if equivalent is None else equivalent != dtype
    return None


def promotion_needed(graph_module: Any) -> bool:
    """True when torch.onnx's ``InsertTypePromotion`` would insert a cast anywhere in ``graph_module`` (or cannot be
    ruled out), False when it would leave every node as it is."""
    import torch
    from torch.onnx._internal.fx.passes import type_promotion

    table = type_promotion.TypePromotionTable()

    def recorded(arg: Any) -> Any:
        return arg.meta.get("val") if isinstance(arg, torch.fx.Node) else arg

    for module in graph_module.modules():
        if not isinstance(module, torch.fx.GraphModule):
            continue
        for node in module.graph.nodes:
            if node.op != "call_function":
                continue
            rule = type_promotion.get_type_promotion_rule(node, table)
            if rule is None:
                continue
            args = torch.utils._pytree.tree_map(recorded, node.args)
            kwargs = torch.utils._pytree.tree_map(recorded, node.kwargs)
            try:
                info = rule.preview_type_promotion(args, kwargs)
            except Exception:  # noqa: BLE001 - whatever the rule cannot preview, the pass decides
                return True
            for i, value in enumerate(args):
                if _changes(value, info.args_dtypes.get(i)) is not False:
                    return True
            for name, value in kwargs.items():
                if _changes(value, info.kwargs_dtypes.get(name)) is not False:
                    return True
    return False
