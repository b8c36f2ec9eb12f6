"""The ``torch.vmap`` calls a saved program may make, checked as data.

When a model calls ``torch.vmap`` inside ``forward``, ``torch.export`` does not inline the batching rule: it records
the pre-dispatch wrappers of ``torch._functorch.predispatch`` as plain call nodes, and torch's serializer writes them
by their qualified name (``torch/_export/serde/serialize.py``, "Handle predispatch wrapper functions"). One
``vmap`` is always the same sequence, whatever the function mapped::

    lazy_load_decompositions()
    _vmap_increment_nesting(batch_size, randomness)        # opens level L = depth + 1
    _add_batch_dim(tensor, in_dim, L)                      # for each mapped input
    ... the mapped function's operators ...
    _remove_batch_dim(tensor, L, batch_size, out_dim)      # for each output
    _vmap_decrement_nesting()                              # closes level L

These five functions touch only functorch's interpreter stack and tensor views: no files, no imports, no code. What
makes them dangerous is the stack they share with the whole process: a program that opens a level it never closes
(or closes one it never opened) leaves every later torch call in the process batched. So :func:`check_vmap_nodes`
admits the five by name (the other functorch wrappers, forward-mode AD's, are refused), checks each call's arguments
by kind and range, and requires the levels of each graph to nest: never closed below zero, all closed at the end, and
a batch dimension added or removed only at a level the graph has opened.
"""

from __future__ import annotations

from typing import Any

__all__ = ["PREDISPATCH", "VMAP_TARGETS", "check_vmap_nodes"]

PREDISPATCH = "torch._functorch.predispatch."
#: The functorch wrappers one ``torch.vmap`` writes, by qualified name, with the kinds of their positional inputs.
VMAP_TARGETS: dict[str, tuple[frozenset[str], ...]] = {
    f"{PREDISPATCH}lazy_load_decompositions": (),
    f"{PREDISPATCH}_vmap_increment_nesting": (frozenset({"as_int", "as_sym_int"}), frozenset({"as_string"})),
    f"{PREDISPATCH}_vmap_decrement_nesting": (),
    f"{PREDISPATCH}_add_batch_dim": (frozenset({"as_tensor"}), frozenset({"as_int"}), frozenset({"as_int"})),
    f"{PREDISPATCH}_remove_batch_dim": (
        frozenset({"as_tensor"}),
        frozenset({"as_int"}),
        frozenset({"as_int", "as_sym_int"}),
        frozenset({"as_int"}),
    ),
}
_RANDOMNESS = frozenset({"error", "same", "different"})
#: Deeper than any model nests ``vmap``; a tensor has at most 64 dims, a batch dim index is below that.
_MAX_LEVEL = 64
_MAX_DIM = 64


def check_vmap_nodes(nodes: Any) -> None:
    """Check the ``vmap`` calls of one graph's node list (see the module docstring).

    The list is raw JSON not yet validated against the schema: anything unexpected is a refusal, never an error of
    another kind.

    Raises:
        ValueError: Saying which node breaks which rule.
    """
    if not isinstance(nodes, list):
        return  # the schema walk refuses it
    depth = 0
    for index, node in enumerate(nodes):
        target = node.get("target") if isinstance(node, dict) else None
        if not isinstance(target, str) or not target.startswith(PREDISPATCH):
            continue
        name = target[len(PREDISPATCH) :]
        kinds = VMAP_TARGETS.get(target)
        if kinds is None:
            raise ValueError(f"node {index}: functorch call {name[:80]!r} is not one torch.vmap writes")
        values = _arguments(node.get("inputs"), kinds, index, name)
        if name == "_vmap_increment_nesting":
            if values[1] not in _RANDOMNESS:
                raise ValueError(
                    f"node {index}: vmap randomness {str(values[1])[:40]!r} is not one of {sorted(_RANDOMNESS)}"
                )
            _in_range(values[0], 0, 2**63 - 1, index, "the vmap batch size")
            depth += 1
            if depth > _MAX_LEVEL:
                raise ValueError(f"node {index}: vmap nested more than {_MAX_LEVEL} levels")
        elif name == "_vmap_decrement_nesting":
            depth -= 1
            if depth < 0:
                raise ValueError(f"node {index}: closes a vmap level that was never opened")
        elif name == "_add_batch_dim":
            _in_range(values[1], 0, _MAX_DIM - 1, index, "the batch dimension")
            _in_range(values[2], 1, depth, index, "the vmap level (one this graph has opened)")
        elif name == "_remove_batch_dim":
            _in_range(values[1], 1, depth, index, "the vmap level (one this graph has opened)")
            _in_range(values[2], 0, 2**63 - 1, index, "the vmap batch size")
            _in_range(values[3], 0, _MAX_DIM - 1, index, "the output dimension")
    if depth:
        raise ValueError(f"{depth} vmap level(s) opened and never closed")


def _arguments(inputs: Any, kinds: tuple[frozenset[str], ...], index: int, name: str) -> list[Any]:
    """The positional arguments' values (a symbolic size is None: it is checked at run time), kinds checked."""
    if not isinstance(inputs, list) or len(inputs) != len(kinds):
        raise ValueError(f"node {index}: {name} takes {len(kinds)} argument(s)")
    values: list[Any] = []
    for item, allowed in zip(inputs, kinds):
        arg = item.get("arg") if isinstance(item, dict) else None
        if not isinstance(arg, dict) or len(arg) != 1 or item.get("name") != "":
            raise ValueError(f"node {index}: {name} takes unnamed arguments of one kind each")
        kind, value = next(iter(arg.items()))
        if kind not in allowed:
            raise ValueError(f"node {index}: {name} does not take {str(kind)[:40]!r} there")
        values.append(None if kind in ("as_sym_int", "as_tensor") else value)
    return values


def _in_range(value: Any, low: int, high: int, index: int, what: str) -> None:
    if value is None:  # a symbolic size: torch checks it against the tensor when it runs
        return
    if type(value) is not int or not low <= value <= high:
        raise ValueError(f"node {index}: {what} must be an integer in [{low}, {high}], got {str(value)[:40]}")
