"""Dims a size guard capped at the sample, traced again from a longer sample.

A model's code may work on a size derived from an input's: CANINE downsamples characters by 4 into "molecules"
(``s // 4``). At a short sample (7 characters) that size is 1, and torch's C++ ``reshape``, reached through
``matmul``'s decomposition (torch/_decomp/decompositions.py ``matmul``, torch 2.13), takes the view-only path a
size-1 axis allows and guards ``(s // 4) == 1``. :func:`~._guards.bound_dims` reads that guard as a cap: the export
would admit 4-7 characters only, although nothing in the model limits them. torch's size-oblivious tracing covers
the sizes of inputs, not sizes derived from them.

:func:`trace_past_caps` traces again from a sample tiled along each capped dim past its cap: the derived size is no
longer 1, the general path (a copy) is taken, and the dim is unbounded above. The sizes the first trace admitted
are kept (the dim's minimum is the first trace's); :func:`admit_down_to` lowers the program's ranges to that minimum
and drops the guards that only said "not 1" of those dims, and the new program is run on the user's sample and
compared with eager there before it is kept. Anything else (eager fails at the longer size, the dim stays capped,
other dims change, the check differs) keeps the first trace.
"""

from __future__ import annotations

import math
import re
from collections.abc import Collection
from typing import Any

from ..dims import Dim

__all__ = ["admit_down_to", "capped_dims", "longer_kwargs", "matches"]

#: A guard torch.export adds when it specializes a size away from 1 (``s != 1``, ``(s // 4) != 1``, ``s > 1``).
_NOT_ONE = re.compile(r"(!= 1|> 1)$")
#: The same of a multiple: ``(64*s) != 64`` (a flattened ``[s, 64]`` view's size, which is 64 only at ``s == 1``).
_MULTIPLE_NOT_ONE = re.compile(r"\(?(?:(\d+)\*[^=]+|[^=]+\*(\d+))\)?!=(\d+)")


def _says_not_one(guard: str) -> bool:
    """Whether ``guard`` only says that a size is not 1 (or a multiple of it is not that multiple)."""
    if _NOT_ONE.search(guard):
        return True
    found = _MULTIPLE_NOT_ONE.fullmatch(guard.replace(" ", ""))
    return found is not None and (found.group(1) or found.group(2)) == found.group(3)


def capped_dims(ranged: dict[str, Dim], bounded: dict[str, Dim]) -> dict[str, Dim]:
    """The dims (of ``bounded``, after the guards were read) whose maximum the guards lowered below the range's."""
    capped = {}
    for name, dim in bounded.items():
        before = ranged.get(name)
        if before is None or dim.max is None or dim.pinned:
            continue
        if before.max is None or dim.max < before.max:
            capped[name] = dim
    return capped


def _past(dim: Dim, hint: int, ceiling: int | None) -> int | None:
    """A size past ``dim``'s cap (twice the sample's, at least the cap plus one, a multiple of its step), or None
    when the range's own ``ceiling`` leaves no room."""
    assert dim.max is not None
    size = max(2 * hint, dim.max + 1)
    size = -(-size // dim.multiple_of) * dim.multiple_of
    return None if ceiling is not None and size > ceiling else size


def longer_kwargs(
    kwargs: dict[str, Any],
    leaf_names: list[str],
    shapes: list[tuple[int | str, ...]],
    capped: dict[str, Dim],
    ranged: dict[str, Dim],
) -> dict[str, Any] | None:
    """``kwargs`` with every axis of a capped dim tiled past the cap (the tensor repeated along it, then cut), or
    None when such an axis is not a top-level tensor input (a cache's) or the range leaves no room."""
    import torch

    sizes: dict[str, int] = {}
    longer = dict(kwargs)
    for leaf, shape in zip(leaf_names, shapes):
        for axis, name in enumerate(shape):
            if not isinstance(name, str) or name not in capped:
                continue
            value = longer.get(leaf)
            if not isinstance(value, torch.Tensor):
                return None
            if name not in sizes:
                size = _past(capped[name], int(value.shape[axis]), ranged[name].max)
                if size is None:
                    return None
                sizes[name] = size
            copies = -(-sizes[name] // int(value.shape[axis]))
            longer[leaf] = torch.cat([value] * copies, dim=axis).narrow(axis, 0, sizes[name]).clone()
    return longer if sizes else None


def _sources(
    program: Any, dims: dict[str, Dim], shapes: list[tuple[int | str, ...]]
) -> dict[Any, tuple[str, list[str]]]:
    """Symbol -> its dim's name and the guard sources (``L['tensors'][i].size()[axis]``) of the axes named after
    ``dims`` (``shapes``: the flat user inputs' shapes)."""
    nodes = {n.name: n for n in program.graph.nodes if n.op == "placeholder"}
    found: dict[Any, tuple[str, list[str]]] = {}
    for index, (node_name, shape) in enumerate(zip(program.graph_signature.user_inputs, shapes)):
        value = nodes[node_name].meta.get("val") if node_name in nodes else None
        for axis, name in enumerate(shape):
            if not isinstance(name, str) or name not in dims or value is None or axis >= value.dim():
                continue
            symbol = getattr(getattr(value.shape[axis], "node", None), "expr", None)
            if symbol is not None:
                found.setdefault(symbol, (name, []))[1].append(f"L['tensors'][{index}].size()[{axis}]")
    return found


def admit_down_to(
    program: Any, dims: dict[str, Dim], shapes: list[tuple[int | str, ...]], names: Collection[str] = ()
) -> None:
    """Let ``program`` take each dim of ``dims`` down to its minimum.

    The ranges of the dims' symbols are lowered to the minimum where they are above it, and the guards that only
    say "not 1" (``!= 1``, ``> 1``, ``(64*s) != 64``) about such a dim are dropped, which ``ExportedProgram.module()``
    would assert on every call (and the saved ``.pt2`` with it): for the dims whose range was lowered, the dims whose
    minimum is 0 or 1 (a range torch left at ``[0, inf]`` while a guard refuses 1: the other backends keep no
    guards and run size 1), and ``names`` (dims the caller checked at a size those guards refuse though the range
    admits it).

    Args:
        program: The ExportedProgram (changed in place).
        dims: Dim name -> the bounds the program must admit (the signature's).
        shapes: The flat user inputs' shapes, axes named after ``dims``.
        names: Dims whose "not 1" guards go even where the range already admits the minimum.
    """
    ranges = getattr(program, "range_constraints", None)
    guards = getattr(program, "_guards_code", None)
    if not isinstance(ranges, dict) or not isinstance(guards, list):
        return
    dropped: list[str] = []
    for symbol, (name, sources) in _sources(program, dims, shapes).items():
        if symbol not in ranges:
            continue
        low = dims[name].min
        lowered = ranges[symbol].lower > low
        if lowered:
            ranges[symbol] = type(ranges[symbol])(low, ranges[symbol].upper)
        if lowered or name in names or low <= 1:  # the signature admits size 1: no guard may refuse it
            dropped.extend(sources)
    if dropped:
        program._guards_code = [g for g in guards if not (_says_not_one(g) and any(s in g for s in dropped))]


def matches(expected: list[Any], produced: list[Any]) -> bool:
    """Whether the program's outputs equal eager's: floating outputs within 1e-4 relative (1e-5 absolute), the
    others exactly, every shape equal."""
    import torch

    if len(expected) != len(produced):
        return False
    for want, got in zip(expected, produced):
        if not isinstance(want, torch.Tensor) or not isinstance(got, torch.Tensor):
            if want != got:
                return False
            continue
        if want.shape != got.shape:
            return False
        if want.is_floating_point() or want.is_complex():
            scale = float(want.abs().max()) if want.numel() else 0.0
            if not math.isfinite(scale) or not torch.allclose(got, want, rtol=1e-4, atol=1e-5 * max(1.0, scale)):
                return False
        elif not torch.equal(want, got):
            return False
    return True
