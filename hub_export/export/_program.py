"""What :func:`~hub_export.export.trace.trace` does to an ``ExportedProgram`` once ``torch.export`` returns it: read
its user outputs, give it its own copy of the small lifted constants, and drop the grad/autocast regions that
``torch.export.load`` could not read back."""

from __future__ import annotations

from typing import Any

__all__ = ["detach_weights", "drop_empty_regions", "own", "user_output_values"]


def user_output_values(program: Any) -> list[Any]:
    """The example values (``meta["val"]``) of the program's user outputs, in order."""
    output_node = next(n for n in program.graph.nodes if n.op == "output")
    specs = program.graph_signature.output_specs
    from torch.export.graph_signature import OutputKind

    values = []
    for spec, arg in zip(specs, output_node.args[0]):
        if spec.kind == OutputKind.USER_OUTPUT:
            values.append(arg.meta["val"])
    return values


def detach_weights(program: Any) -> None:
    """Give the program its own copy of the lifted tensor constants (small: masks, rotary tables), which eager
    code may update in place; parameters and buffers stay shared with the model, as ``torch.export`` leaves them.

    Weights are never copied: an export holds one copy of them however many components and formats use it (a
    copy would double the memory of a multi-GB model, and break tied weights into two tensors that would then be
    stored twice). Changing the model's weights in place after exporting changes the export's program too, until
    it is saved.
    """
    for name, value in list(program.constants.items()):
        program.constants[name] = value.detach().clone() if hasattr(value, "detach") else value


#: Higher-order operators that only run their subgraph under a grad or autocast mode: with no outputs, nothing.
_REGION_OPS = ("wrap_with_set_grad_enabled", "wrap_with_autocast")


def drop_empty_regions(program: Any) -> int:
    """Remove the ``torch.no_grad()`` / autocast regions whose results the model never uses.

    ``torch.export`` keeps a ``with torch.no_grad():`` block as a ``wrap_with_set_grad_enabled`` node even when
    nothing reads what it computes (a mask computed for a branch the sample inputs do not take): its subgraph then
    returns nothing. ``torch.export.save`` writes such a node with no outputs, and ``torch.export.load`` cannot read
    it back: its deserializer gives the node no ``val`` and the verifier refuses the program ("Node.meta
    wrap_with_set_grad_enabled is missing val field", torch/_export/serde/serialize.py ``deserialize_outputs`` and
    torch/_export/verifier.py ``_check_val``; torch 2.13). The program is functional (a mutation is an output), so
    a region with no outputs and no users computes nothing observable: it is removed with its subgraph.

    Returns:
        The number of regions removed.
    """
    removed = 0
    for module in list(program.graph_module.modules()):
        graph = getattr(module, "graph", None)
        if graph is None:
            continue
        here = 0
        for node in list(graph.nodes):
            name = getattr(node.target, "__name__", "")
            if node.op != "call_function" or name not in _REGION_OPS or node.users:
                continue
            body: Any = next((arg for arg in node.args if getattr(arg, "op", None) == "get_attr"), None)
            subgraph = getattr(module, body.target, None) if body is not None else None
            if subgraph is None:
                continue
            outputs = next((n.args[0] for n in subgraph.graph.nodes if n.op == "output"), None)
            if outputs is None or len(outputs) > 0:
                continue
            graph.erase_node(node)
            if not body.users:
                graph.erase_node(body)
                module.delete_submodule(body.target)
            here += 1
        if here:
            module.recompile()
            removed += here
    return removed


def own(program: Any) -> Any:
    """``program`` as trace keeps it: its own copy of the lifted constants (:func:`detach_weights`), without the
    empty grad/autocast regions (:func:`drop_empty_regions`)."""
    detach_weights(program)
    drop_empty_regions(program)
    return program
