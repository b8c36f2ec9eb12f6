"""A ``.pt2`` program called as the model is: keyword arguments in, the output's structure out.

hub_export traces a model as one flat graph (``tensors[0..n]`` in, a tuple out: :mod:`hub_export.structure`).
Saved so, ``torch.export.load(path).module()`` takes the flat tensors positionally and returns a flat tuple, which
no one outside hub_export knows how to call. :func:`use_model_call` gives the program the model's own calling
convention instead, in the program's call spec (``module_call_graph``), which ``ExportedProgram.module()`` and
``torch.export.save``/``load`` read:

* inputs: the model's kwargs (``input_ids=``, ``attention_mask=``; a cache as one tuple of per-layer tuples, the
  layout of transformers' ``past_key_values`` as a tuple: ``((key, value), ...)``, ``(key, value, cross key, cross
  value)`` for an encoder-decoder);
* outputs: a dict of the model output's fields (``{"logits": ..., "past_key_values": ((key, value), ...)}``): a
  ``ModelOutput`` class cannot be rebuilt by a plain ``torch.export.load``, a dict can;
* the sample inputs and the guards (``L['tensors'][0]`` becomes ``L['input_ids']``) follow.

The flat tensors are the same, in the same order (checked): hub_export's runner calls the program through its call
spec (:func:`call_flat`), so a program of either convention runs. A structure a pytree of tuples and dicts cannot
hold (a static cache's fill lengths, a layer's extra state) keeps the flat convention.
"""

from __future__ import annotations

import re
from typing import Any

from ...signature import Signature

__all__ = ["call_flat", "use_model_call"]

_CACHE_PARTS = ("key", "value")
#: An input's source in a guard: ``L['input_ids']``, ``L['past_key_values'][0][1]``.
_SOURCE = re.compile(r"(?<!\w)L(?:\['[^']*'\]|\[\d+\])+")


def use_model_call(program: Any, signature: Signature) -> bool:
    """Give ``program`` (a flat ``ExportedProgram`` traced from ``signature``) the model's calling convention, in
    place; returns whether it could (see the module docstring)."""
    import torch.utils._pytree as pytree

    kwargs = {name: _python(node) for name, node in signature.input_structure}
    outputs = _python(signature.output_structure)
    if any(value is _UNSUPPORTED for value in _walk(kwargs)) or any(v is _UNSUPPORTED for v in _walk(outputs)):
        return False
    in_leaves, out_leaves = pytree.tree_leaves(((), kwargs)), pytree.tree_leaves(outputs)
    if in_leaves != list(range(len(signature.inputs))) or out_leaves != list(range(len(signature.outputs))):
        return False  # pytree would order them otherwise: keep the flat convention
    call = program.module_call_graph[0]
    if call.fqn != "" or call.signature is None:
        return False
    example = program.example_inputs
    flat_example = list(example[0]) if example is not None else None
    # the guards name each input by its source: ``L['tensors'][i]`` for hub_export's flat call, ``L['tensors_i']``
    # for a program re-exported from a module's positional arguments (as a PT2E quantizer's is); they become the
    # model's names, and a guard naming anything else keeps the program flat
    new = [f"L{pytree.keystr(path)}" for path, _ in pytree.tree_leaves_with_path(kwargs)]
    renamed = {}
    for index, name in enumerate(new):
        renamed[f"L['tensors'][{index}]"] = renamed[f"L['tensors_{index}']"] = name
    pattern = re.compile("|".join(re.escape(source) for source in sorted(renamed, key=len, reverse=True)))
    guards = [pattern.sub(lambda m: renamed[m.group(0)], guard) for guard in program._guards_code]
    kept = set(new)
    if any(source not in kept for guard in guards for source in _SOURCE.findall(guard)):
        return False
    call.signature.in_spec = pytree.tree_structure(((), kwargs))
    call.signature.out_spec = pytree.tree_structure(outputs)
    call.signature.forward_arg_names = list(kwargs)
    program._guards_code = guards
    if flat_example is not None and len(flat_example) == len(new):
        program._example_inputs = pytree.tree_unflatten(flat_example, call.signature.in_spec)
    return True


def call_flat(module: Any, in_spec: Any, tensors: list[Any]) -> list[Any]:
    """Call ``module`` (an ``ExportedProgram.module()``) on flat tensors through its call spec; returns the flat
    outputs."""
    import torch.utils._pytree as pytree

    args, kwargs = pytree.tree_unflatten(list(tensors), in_spec)
    return pytree.tree_leaves(module(*args, **kwargs))


class _Unsupported:
    """A part of a structure no pytree of tuples and dicts holds."""


_UNSUPPORTED = _Unsupported()


def _python(node: dict[str, Any]) -> Any:
    """The structure node as tuples and dicts with the flat index at each tensor leaf."""
    kind = node.get("type")
    if kind == "tensor":
        return node["index"]
    if kind in ("tuple", "list"):
        items = [_python(item) for item in node["items"]]
        return tuple(items) if kind == "tuple" else items
    if kind in ("dict", "model_output"):
        pairs = node["items"] if kind == "dict" else node["fields"]
        present = [(key, child) for key, child in pairs if child.get("type") not in ("none", "constant")]
        if not all(isinstance(key, str) and key.isidentifier() for key, _ in present):
            return _UNSUPPORTED
        return {key: _python(child) for key, child in present}
    if kind == "cache" and not node.get("state"):
        return tuple(_cache_layer(layer) for layer in node["layers"])
    return _UNSUPPORTED


def _cache_layer(layer: dict[str, Any]) -> Any:
    """One layer as transformers' tuple caches hold it: ``(key, value)``, or ``(self key, self value, cross key,
    cross value)`` for an encoder-decoder."""
    parts = [layer["decoder"], layer["encoder"]] if "decoder" in layer else [layer]
    if any(set(part) != set(_CACHE_PARTS) for part in parts):
        return _UNSUPPORTED  # a static cache's lengths, state-space states, extra state
    return tuple(_python(part[key]) for part in parts for key in _CACHE_PARTS)


def _walk(value: Any) -> list[Any]:
    """Every leaf of a structure built by :func:`_python`."""
    if isinstance(value, (tuple, list)):
        return [leaf for item in value for leaf in _walk(item)]
    if isinstance(value, dict):
        return [leaf for item in value.values() for leaf in _walk(item)]
    return [value]
