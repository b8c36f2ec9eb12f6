"""Reversible edits of a traced graph, and the rewrites shared by the formats that re-run
``ExportedProgram.run_decompositions`` while lowering.

:func:`edited_nodes` is the one place that edits an ``ExportedProgram``'s graphs inside a ``with`` block: it walks
the graph modules, inserts helper nodes (:class:`Inserter`, values from :func:`fake_value`), sets node attributes,
and restores, erases and recompiles in ``finally``. The rewrites here and the backends' own go through it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

__all__ = [
    "Inserter",
    "NodeEdit",
    "NodeRewrite",
    "all_true_checks_as_all",
    "edited_nodes",
    "fake_value",
    "rewritten_nodes",
    "views_after_permutes_as_reshapes",
]

#: ``rewrite(node) -> {attribute: new value} | None``: what :func:`rewritten_nodes` sets on a node (``target``,
#: ``args``), or None to leave it.
NodeRewrite = Callable[[Any], "dict[str, Any] | None"]


def _is_mutating(node: Any) -> bool:
    """True for an operator writing a tensor's values (``detach_`` only changes autograd metadata)."""
    schema = getattr(node.target, "_schema", None)
    return bool(schema is not None and schema.is_mutable and schema.name != "aten::detach_")


def fake_value(mode: Any, target: Any, *args: Any, **kwargs: Any) -> Any:
    """``target(*args, **kwargs)`` on fake tensors of ``mode``: the value of a node inserted into a traced graph,
    computed without guards and with FakeTensorMode's class-wide dispatch cache off (a cached entry of another
    trace's sizes, or a guard recorded here, made OpenVINO's ``convert_model`` re-trace fix every size to the
    sample's)."""
    from torch._subclasses.fake_tensor import disable_fake_tensor_cache

    env = mode.shape_env
    guards = env.suppress_guards() if env is not None else contextlib.nullcontext()
    with mode, guards, disable_fake_tensor_cache(mode):
        return target(*args, **kwargs)


class Inserter:
    """Inserts ``call_function`` nodes before one node of a graph (``add(target, *args, **kwargs)`` returns the new
    node) and computes their values with :func:`fake_value` in the fake mode of that node's inputs (None where it
    has none). The values are kept here (:meth:`val`) and, with ``record``, in each new node's ``meta["val"]``."""

    def __init__(self, graph: Any, node: Any, *, record: bool) -> None:
        self.graph, self.node, self.record = graph, node, record
        self.created: list[Any] = []
        self._vals: dict[Any, Any] = {}
        self._mode: Any = ...

    @property
    def mode(self) -> Any:
        """The FakeTensorMode of the node's input values, or None."""
        if self._mode is ...:
            import torch
            from torch._guards import detect_fake_mode

            values = [a.meta.get("val") for a in self.node.all_input_nodes]
            self._mode = detect_fake_mode([v for v in values if isinstance(v, torch.Tensor)])
        return self._mode

    def __call__(self, target: Any, *args: Any, **kwargs: Any) -> Any:
        import torch

        with self.graph.inserting_before(self.node):
            new = self.graph.call_function(target, args, kwargs)
        self.created.append(new)
        unwrap = lambda a: self.val(a) if isinstance(a, torch.fx.Node) else a  # noqa: E731
        values = torch.utils._pytree.tree_map(unwrap, (args, kwargs))
        mode = self.mode
        self._vals[new] = None if mode is None else fake_value(mode, target, *values[0], **values[1])
        if self.record:
            new.meta["val"] = self._vals[new]
        return new

    def val(self, node: Any) -> Any:
        """A node's value on fake tensors (a new node's from here, another's from its ``meta``)."""
        return self._vals[node] if node in self._vals else node.meta.get("val")


#: ``edit(node, add) -> {attribute: new value} | None``: what :func:`edited_nodes` sets on a node, after inserting
#: any helper nodes before it with ``add`` (an :class:`Inserter`).
NodeEdit = Callable[[Any, Inserter], "dict[str, Any] | None"]


@contextlib.contextmanager
def edited_nodes(program: Any, edit: NodeEdit, *, nested: bool = True, record_values: bool = False) -> Iterator[int]:
    """Edit the ``call_function`` nodes of ``program`` inside the block: ``edit`` may insert helper nodes before a
    node (``add``) and returns the attributes to set on it (``target``, ``args``, ``kwargs``), or None. In
    ``finally`` the attributes are restored, the helper nodes erased (those of a node left unchanged too) and each
    graph module that changed is recompiled, as it was after the edit.

    Args:
        nested: also edit the nested graphs: a region the model runs under ``torch.no_grad()`` or ``autocast`` is
            traced as a higher-order operator whose body is a submodule (``wrap_with_set_grad_enabled``), which
            ``run_decompositions`` inlines. False: the top graph only.
        record_values: also store each helper node's fake value in its ``meta["val"]`` (:class:`Inserter`).

    Yields:
        How many nodes were edited.
    """
    import torch

    modules = [m for m in program.graph_module.modules() if isinstance(m, torch.fx.GraphModule)]
    changed: list[tuple[Any, dict[str, Any]]] = []
    created: list[tuple[Any, list[Any]]] = []
    touched = []
    try:
        for module in modules if nested else modules[:1]:
            graph, before = module.graph, len(changed)
            new_nodes: list[Any] = []
            created.append((graph, new_nodes))
            for node in list(graph.nodes):
                if node.op != "call_function":
                    continue
                add = Inserter(graph, node, record=record_values)
                try:
                    new = edit(node, add)
                finally:  # erased in the end, even where ``edit`` failed half-way
                    new_nodes.extend(add.created)
                if new:
                    changed.append((node, {name: getattr(node, name) for name in new}))
                    for name, value in new.items():
                        setattr(node, name, value)
            if len(changed) > before or new_nodes:
                touched.append(module)
                module.recompile()
        yield len(changed)
    finally:
        for node, old in reversed(changed):
            for name, value in old.items():
                setattr(node, name, value)
        for graph, new_nodes in created:
            for new in reversed(new_nodes):
                graph.erase_node(new)
        for module in touched:
            module.recompile()


def rewritten_nodes(program: Any, rewrite: NodeRewrite) -> contextlib.AbstractContextManager[int]:
    """Set the attributes ``rewrite`` returns on every ``call_function`` node of ``program`` (nested graphs
    included) inside the block, then restore the old values (:func:`edited_nodes` without helper nodes).

    Yields:
        How many nodes were rewritten.
    """
    return edited_nodes(program, lambda node, add: rewrite(node))


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
