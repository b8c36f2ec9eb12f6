"""Lowering a traced program as it is, without ``run_decompositions``'s re-trace, when nothing in it needs one.

``torch.onnx.export`` and ``openvino.convert_model`` both begin with ``ExportedProgram.run_decompositions``, which
re-traces the whole program (functionalization and every decomposition, each symbolic size derived again). At
Qwen2.5-0.5B that re-trace took 15.0 s of a 42.9 s ONNX generation export and 19.0 s of 43.1 s to OpenVINO, more
than ``torch.export``'s own trace (11.9-12.5 s; ``benchmarks/export_profile.py``).

The program ``torch.export`` returns needs none of that when

* it writes no tensor: no in-place operator, no mutated buffer or input. A view and a copy then hold the same values,
  and values are all a lowering translates;
* every operator in it is one the format translates as it stands.

:func:`direct_program` makes such a program from a copy of the graph, after the few rewrites that give the
training-IR forms the value-identical ones the re-trace would have produced: ``aten.to`` becomes ``aten._to_copy``
(or nothing, when the dtype stays), ``__and__`` / ``__or__`` / ``__xor__`` their ``bitwise_`` ops, a
``wrap_with_set_grad_enabled`` region is inlined (gradient mode means nothing to an inference graph), and
``_assert_tensor_metadata`` checks of the trace are dropped. A format adds its own renames (OpenVINO's frontend has
no ``reshape``: in a graph that writes nothing it is ``view``). Anything else returns None, and the caller re-traces
as before; the backends also re-trace when the direct lowering fails (``OnnxExporter``, ``OpenVINOExporter``).
"""

from __future__ import annotations

import copy
import logging
import operator
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

__all__ = ["blocking_operators", "direct_program", "lowered_with_fallback"]

logger = logging.getLogger(__name__)

T = TypeVar("T")


def _training_ir_rewrites() -> dict[Any, Any]:
    """Training-IR operators and the inference forms the re-trace gives them (casts: see :func:`_rewrite`)."""
    import torch

    aten = torch.ops.aten
    return {
        aten.__and__.Tensor: aten.bitwise_and.Tensor,
        aten.__or__.Tensor: aten.bitwise_or.Tensor,
        aten.__xor__.Tensor: aten.bitwise_xor.Tensor,
    }


def _casts() -> set[Any]:
    import torch

    aten = torch.ops.aten
    return {aten.to.dtype, aten.to.dtype_layout, aten.to.device, aten.to.other}


def _inline_set_grad_regions(module: Any) -> bool:
    """Inline every ``wrap_with_set_grad_enabled(enabled, body, *operands)`` of ``module``'s graph; False when one
    cannot be (its outputs read other than by index)."""
    import torch

    region = torch.ops.higher_order.wrap_with_set_grad_enabled
    graph = module.graph
    for node in list(graph.nodes):
        if node.op != "call_function" or node.target is not region:
            continue
        body_node = node.args[1]
        body = getattr(module, body_node.target)
        if any(user.target is not operator.getitem for user in node.users):
            return False
        placeholders = [n for n in body.graph.nodes if n.op == "placeholder"]
        with graph.inserting_before(node):
            result = graph.graph_copy(body.graph, dict(zip(placeholders, node.args[2:], strict=True)))
        results = result if isinstance(result, (tuple, list)) else (result,)
        for user in list(node.users):
            user.replace_all_uses_with(results[user.args[1]])
            graph.erase_node(user)
        graph.erase_node(node)
        if not body_node.users:
            graph.erase_node(body_node)
            delattr(module, body_node.target)
    return True


def _rewrite(graph: Any, renames: Mapping[Any, Any]) -> bool:
    """The value-identical rewrites of the module docstring, in place; False where one cannot be made."""
    import torch

    drop = {torch.ops.aten._assert_tensor_metadata.default}
    casts = _casts()
    for node in list(graph.nodes):
        if node.op != "call_function":
            continue
        if node.target in drop:
            graph.erase_node(node)
        elif node.target in renames:
            node.target = renames[node.target]
        elif node.target in casts:
            source, value = node.args[0], node.meta.get("val")
            before = getattr(source, "meta", {}).get("val")
            if not isinstance(value, torch.Tensor) or not isinstance(before, torch.Tensor):
                return False
            if before.dtype == value.dtype:
                node.replace_all_uses_with(source)
            else:
                with graph.inserting_before(node):
                    cast = graph.call_function(torch.ops.aten._to_copy.default, (source,), {"dtype": value.dtype})
                cast.meta = dict(node.meta)
                node.replace_all_uses_with(cast)
            graph.erase_node(node)
    return True


def blocking_operators(graph: Any, translates: Callable[[Any], bool]) -> list[str]:
    """The operators of ``graph`` that keep it from being lowered directly: in-place ones, higher-order ones, and
    those ``translates`` refuses. Python's own functions (size arithmetic, ``getitem``) never block."""
    import torch

    blocking = []
    for node in graph.nodes:
        if node.op != "call_function":
            continue
        target = node.target
        if isinstance(target, torch._ops.OpOverload):
            if target._schema.is_mutable or not translates(target):
                blocking.append(str(target))
        elif isinstance(target, torch._ops.OperatorBase):  # higher-order: its body would need the re-trace too
            blocking.append(str(target))
    return sorted(set(blocking))


def direct_program(
    program: Any, translates: Callable[[Any], bool], renames: Mapping[Any, Any] | None = None
) -> Any | None:
    """A copy of ``program`` a format can lower without ``run_decompositions``, or None when it needs the re-trace.

    Args:
        program: The traced ``torch.export.ExportedProgram``; it is not changed.
        translates: Whether the format translates an operator overload as it stands.
        renames: The format's own operator renames, applied with the shared ones.
    """
    import torch

    signature = program.graph_signature
    if signature.buffers_to_mutate or signature.user_inputs_to_mutate:
        return None
    module = copy.deepcopy(program.graph_module)
    if not _inline_set_grad_regions(module):
        return None
    if any(isinstance(m, torch.fx.GraphModule) for m in module.children()):
        return None  # the bodies of loops and conditionals: they need the re-trace as well
    if not _rewrite(module.graph, {**_training_ir_rewrites(), **(renames or {})}):
        return None
    if blocking_operators(module.graph, translates):
        return None
    if any(n.op == "call_function" and "val" not in n.meta for n in module.graph.nodes):
        return None  # a node a rewrite inserted without its value: the re-trace gives it one
    module.graph.lint()
    module.recompile()
    from torch._export.verifier import SpecViolationError

    try:
        return torch.export.ExportedProgram(
            root=module,
            graph=module.graph,
            graph_signature=signature,
            state_dict=program.state_dict,
            range_constraints=copy.deepcopy(program.range_constraints),
            module_call_graph=copy.deepcopy(program.module_call_graph),
            example_inputs=program.example_inputs,
            constants=program.constants,
            verifiers=program.verifiers,
        )
    except SpecViolationError:  # what torch.export's verifier refuses, the re-trace makes valid
        return None


def lowered_with_fallback(lower: Callable[[list[bool] | None], T], what: str) -> T:
    """``lower(direct)``, where ``lower`` appends a True to ``direct`` each time it gives a format a program as it
    stands (a backend's patch around :func:`direct_program`); when that lowering raises, ``lower(None)``: the format's
    own path through the re-trace. An error raised with no program given directly is raised as it is."""
    direct: list[bool] = []
    try:
        return lower(direct)
    except Exception as exc:  # noqa: BLE001 - lowered as it stood: lower the re-traced program instead
        if not direct:
            raise
        logger.info("%s without the re-trace failed (%s: %s); re-tracing", what, type(exc).__name__, exc)
        return lower(None)
