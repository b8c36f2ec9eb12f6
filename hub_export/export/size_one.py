"""Sizes down to 1 on the symbolic axes of a graph export, where the program computes them as eager does.

``torch.export`` traces a dynamic axis assuming it is neither 0 nor 1 (its 0/1 specialization): an axis sampled
at 7 tokens is recorded as ``[2, ...]`` and guarded ``!= 1``, so an export refuses a one-token call, or a batch of
one, that the eager model takes. The cause is general (every model, every axis); so is the fix:
:func:`one_size_candidates` finds the input axes whose dim the trace bounded below by 2, the export lowers them to 1
before lowering (``export_component(lower_mins=...)``: a backend then builds its program for them, Dynamo drops the
"not 1" guards, OpenVINO sets the IR's ranges from 1), and :func:`check_size_one` runs the program at size 1 on those
axes against the eager model, after the parity check, on the same runner. A dim whose size 1 the program does not
compute as eager does keeps its minimum of 2 in the export's signature, so a call of size 1 is refused before the
runtime sees it, never answered wrongly.
"""

from __future__ import annotations

from typing import Any

from ..dims import Dim
from ..signature import Signature

__all__ = ["check_size_one", "one_size_candidates"]


def one_size_candidates(signature: Signature, kwargs: dict[str, Any]) -> dict[str, int]:
    """``{dim: 1}`` for each symbolic dim the trace bounded below by 2 that is an axis of a plain tensor kwarg
    (a size a call gives directly, not one derived from others)."""
    import torch

    plain = {name for name, node in signature.input_structure if node.get("type") == "tensor"}
    found: dict[str, int] = {}
    for spec in signature.inputs:
        if spec.name not in plain or not isinstance(kwargs.get(spec.name), torch.Tensor):
            continue
        for axis in spec.shape:
            dim = signature.dims.get(axis) if isinstance(axis, str) else None
            if dim is not None and not dim.pinned and dim.min == 2:
                found[dim.name] = 1
    return found


def check_size_one(
    runner: Any, signature: Signature, module: Any, kwargs: dict[str, Any], dims: dict[str, int], atol: float
) -> Signature:
    """``signature`` with each of ``dims`` back at a minimum of 2 unless the program, run by ``runner`` on
    ``kwargs`` cut to size 1 on that dim's axes, gives eager's outputs within ``atol``: all of them at once first,
    then one at a time."""
    if not dims or _matches(runner, signature, module, kwargs, set(dims), atol):
        return signature
    kept = {name for name in dims if _matches(runner, signature, module, kwargs, {name}, atol)}
    restored = {name: Dim(name, 2, signature.dims[name].max, signature.dims[name].multiple_of) for name in dims}
    return signature.replace(dims={**signature.dims, **{n: d for n, d in restored.items() if n not in kept}})


def _matches(
    runner: Any, signature: Signature, module: Any, kwargs: dict[str, Any], dims: set[str], atol: float
) -> bool:
    """Whether the program gives eager's outputs on ``kwargs`` cut to size 1 along the axes of ``dims``."""
    import torch

    from ..structure import flatten_value

    axes = {spec.name: [i for i, axis in enumerate(spec.shape) if axis in dims] for spec in signature.inputs}
    cut = dict(kwargs)
    for name, value in kwargs.items():
        if isinstance(value, torch.Tensor) and axes.get(name):
            for axis in axes[name]:
                value = value.narrow(axis, 0, 1)
            cut[name] = value
    try:
        with torch.no_grad():
            expected: list[tuple[str, Any]] = []
            flatten_value(module(**cut), (), expected)
        produced = runner.run_flat(signature.flatten_inputs(cut))
    except Exception:  # noqa: BLE001 - eager or the runtime refusing size 1 decides it, whatever it raises
        return False
    if len(produced) != len(expected):
        return False
    for (_, want), got in zip(expected, produced):
        if not isinstance(want, torch.Tensor) or tuple(want.shape) != tuple(got.shape):
            return False
        if want.is_floating_point() and want.numel() and float((want.float() - got.float()).abs().max()) > atol:
            return False
        if not want.is_floating_point() and not torch.equal(want, got):
            return False
    return True
