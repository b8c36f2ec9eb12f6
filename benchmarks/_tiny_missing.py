"""Inputs a forward asks for only when it runs (``coverage.py --all``): an optional parameter its code requires
("`visual_feats` cannot be `None`", "`aspect_ratio_ids` must be provided", "You have to specify X", "exactly one of
X or ..."), or a required one no builder made ("missing 1 required positional argument: 'X'").

:func:`run_completing` runs eager on the inputs; when the error names such a parameter of the forward, the input is
built and the call retried (a few inputs deep). An input is built by the builder of its kind where one exists
(``builders``: audio features, images...), else from the shape the forward's own docstring documents for it
(``visual_feats (`torch.Tensor` of shape `(batch_size, num_visual_features, visual_feat_dim)`)``): ``batch_size``
is the batch of the other inputs, a sequence axis the text's length, ``num_images`` 1, a name the config holds
(``visual_feat_dim``) its value, a product (``C x P x P``) the product of its parts, any other length
:data:`LENGTH`. Ids, masks, indices and sizes are integer ones (a valid
id, offset by one where 0 pads); anything else is seeded normal noise.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

__all__ = ["LENGTH", "documented_shape", "missing_input", "run_completing"]

#: the size of a documented axis the config does not name (a count of features, a sequence length)
LENGTH = 5

_MISSING = [
    re.compile(r"`?(\w+)`? cannot be `?None`?"),
    re.compile(r"You (?:have|need) to (?:specify|provide|pass) (?:either )?`?(\w+)`?"),
    re.compile(r"`?(\w+)`? (?:must|should|has to) be (?:provided|specified|passed)"),
    re.compile(r"missing \d+ required positional arguments?: '(\w+)'"),
    re.compile(r"exactly one of `?(\w+)`? or"),
]


def missing_input(params: set[str], inputs: dict[str, Any], exc: BaseException) -> str | None:
    """The forward parameter (of ``params``) the error says is missing from ``inputs``, if any: named by the
    message, or a None the code dereferenced ("'NoneType' object is not subscriptable") held by a variable of the
    failing line named like a forward parameter (``image_merge_sizes.tolist()``)."""
    text = str(exc)
    for pattern in _MISSING:
        for name in pattern.findall(text):
            if name in params and name not in inputs:
                return name
    if "NoneType" in text:
        return _none_parameter(params, inputs, exc)
    return None


def _none_parameter(params: set[str], inputs: dict[str, Any], exc: BaseException) -> str | None:
    import linecache

    frames = []
    tb = exc.__traceback__
    while tb is not None:
        frames.append(tb)
        tb = tb.tb_next
    for tb in reversed(frames[-4:]):  # the failing line first, then its callers
        code = tb.tb_frame.f_code
        line = linecache.getline(code.co_filename, tb.tb_lineno)
        for name in re.findall(r"[A-Za-z_]\w*", line):
            if tb.tb_frame.f_locals.get(name, 0) is not None:
                continue
            # the parameter itself, or the forward's name for it (Video-LLaMA 3: merge_sizes <- image_merge_sizes)
            found = [p for p in sorted(params) if (p == name or p.endswith("_" + name)) and p not in inputs]
            images = [p for p in found if p == name or ("pixel_values" in inputs and p.startswith("image"))]
            if images or found:
                return (images or found)[0]
    return None


def documented_shape(fn: Any, name: str) -> list[str] | None:
    """The axes the docstring of ``fn`` documents for parameter ``name`` (``(batch_size, sequence_length)`` ->
    ``["batch_size", "sequence_length"]``), or None."""
    doc = getattr(fn, "__doc__", None) or ""
    match = re.search(rf"\b{re.escape(name)} \([^)]*?of shape `?\(([^)]*)\)", doc)
    if not match:
        return None
    return [axis.strip() for axis in match.group(1).split(",") if axis.strip()]


def _config_int(config: Any, name: str) -> int | None:
    """``name``'s integer value at the config's top level or in one of its sub-configs."""
    seen: set[int] = set()
    stack = [config]
    while stack:
        level = stack.pop(0)
        if id(level) in seen:
            continue
        seen.add(id(level))
        value = getattr(level, name, None)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
        stack += [v for v in vars(level).values() if hasattr(v, "to_dict") and hasattr(v, "model_type")]
    return None


def _axis(config: Any, axis: str, inputs: dict[str, Any]) -> int:
    parts = [p.strip(" `") for p in re.split(r"\s*[x*×]\s*", axis) if p.strip(" `")]
    size = 1
    for part in parts:
        if part.isdigit():
            size *= int(part)
        elif part in ("batch_size", "batch"):
            size *= _batch(inputs)
        elif "seq" in part and "input_ids" in inputs:  # the text's length (a mask over the tokens)
            size *= int(inputs["input_ids"].shape[-1])
        elif part.startswith(("num_images", "max_num_images")):  # one image per row, or a grid row per image
            grid = next((inputs[n] for n in ("image_grid_thw", "grid_thw") if n in inputs), None)
            size *= int(grid.shape[0]) if grid is not None else 1
        else:
            size *= _config_int(config, part) or LENGTH
    return size


def _integer(name: str) -> bool:
    return bool(re.search(r"(_ids|_mask|_masks|_indices|_index|_idx|_sizes)$", name)) or name in ("ids", "mask")


def documented_input(model: Any, name: str, inputs: dict[str, Any], seed: int) -> Any | None:
    """``name`` built from the shape the forward's docstring documents (sizes of the other ``inputs`` where the
    shape names them), or None when it documents none."""
    import torch

    axes = documented_shape(model.forward, name)
    if not axes:
        return None
    shape = [_axis(model.config, axis, inputs) for axis in axes]
    if _integer(name):
        return torch.ones(*shape, dtype=torch.int64)
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed + 17))


def _batch(inputs: dict[str, Any]) -> int:
    import torch

    first = next((v for v in inputs.values() if torch.is_tensor(v) and v.dim()), None)
    return int(first.shape[0]) if first is not None else 2


def run_completing(
    model: Any,
    inputs: dict[str, Any],
    builders: Callable[[Any, str, dict[str, Any], int], list[dict[str, Any]]],
    seed: int = 0,
    depth: int = 3,
) -> dict[str, Any]:
    """``inputs``, completed with every input eager's errors name (see the module's docstring), once eager runs on
    them; raises eager's error otherwise.

    ``builders(model, name, inputs, seed)``: candidate dicts holding ``name`` (and its companions, a mask), from
    the builder of its kind, sized to go with ``inputs``; an empty list falls back to the documented shape.
    """
    import inspect

    import torch

    try:
        with torch.no_grad():
            model(**inputs)
        return inputs
    except Exception as exc:  # noqa: BLE001 - read the error: a missing input is built, anything else re-raised
        params = set(inspect.signature(model.forward).parameters)
        name = missing_input(params, inputs, exc)
        if name is None or depth <= 0:
            raise
        candidates = builders(model, name, inputs, seed)
        if not candidates:
            built = documented_input(model, name, inputs, seed)
            candidates = [{name: built}] if built is not None else []
        if not candidates:
            raise
        last: BaseException = exc
        for extra in candidates[:4]:  # a few layouts per input: depth x layouts eager calls at most
            try:
                return run_completing(model, {**inputs, **extra}, builders, seed, depth - 1)
            except Exception as error:  # noqa: BLE001 - the next candidate
                last = error
        raise last from exc
