"""Grid-driven vision encoders traced with the image grid as a true input (dynamic over patches, grids, images).

The Qwen2-VL family and the encoders built from its modular code (Qwen2.5-VL, Qwen3-VL, GLM-4V, Kimi-K2.5,
MiniMax-M3-VL, ...) derive their position ids, attention segments and window order from the values of
``grid_thw`` (one ``(t, h, w)`` row per image) with Python loops over ``grid_thw.tolist()``, and attend within
each image by splitting the packed patches with ``torch.split(..., lengths.tolist())``. ``torch.export`` cannot
trace either (``GuardOnDataDependentSymNode``), so the export used to fix the grid to the sample's values. While
tracing, the patches below compute the same tensors with per-patch index arithmetic whose shapes depend only on
the number of patches:

* ``transformers.vision_utils.get_vision_position_ids``: each patch's image from the cumulative patch counts, its
  frame, row and column (in spatial-merge block order) from its index within that image.
* ``transformers.vision_utils.get_vision_cu_seqlens``: the segment lengths ``repeat_interleave(h * w, t)`` as one
  length per frame, the frame's image found from the cumulative frame counts.
* ``transformers.vision_utils.get_vision_window_index``: the window order of each merged token (its window's rank
  among the clipped windows of its frame, then its place in the window) scattered into the permutation; the window
  boundaries as a sorted list padded with zeros (empty segments), which replaces ``unique_consecutive``.
* Every attention module whose forward splits the packed sequence by ``cu_seqlens.tolist()`` when no varlen kernel
  is available (``VisionAttention.forward`` in transformers/models/qwen2_vl/modeling_qwen2_vl.py and its ~30 copies)
  takes its varlen branch instead, served by the model's own attention function (SDPA or eager) with a
  block-diagonal mask built from the segment ids (``cu_seqlens`` scattered as boundary marks, summed): the same
  attention within each segment, one call for all.

The helpers are patched in the modeling modules the model's classes come from (they import them by name); eager
outside tracing is untouched. Numbers equal eager's within float rounding (the masked softmax adds exact zeros).
"""

from __future__ import annotations

import contextlib
import inspect
import sys
from collections.abc import Callable, Iterator
from typing import Any

from ._base import patch_attribute

__all__ = ["grid_as_input", "segment_ids"]

_REASON = (
    "transformers.vision_utils loops over grid_thw.tolist() and vision attention splits by cu_seqlens.tolist() "
    "(data-dependent sizes torch.export cannot trace)"
)


def _patch_index(grid_thw: Any) -> tuple[Any, Any, Any]:
    """For every patch of the packed sequence: its image, its index within that image, and the images' counts."""
    import torch

    counts = grid_thw[:, 0] * grid_thw[:, 1] * grid_thw[:, 2]
    ends = counts.cumsum(0)
    total = counts.sum().item()
    patch = torch.arange(total, device=grid_thw.device)
    image = (patch[:, None] >= ends[None, :]).sum(-1)
    local = patch - (ends - counts)[image]
    return image, local, counts


def vision_position_ids(
    grid_thw: Any, spatial_merge_size: Any, include_temporal: bool = False, kwargs: dict | None = None
) -> Any:
    """``get_vision_position_ids`` (transformers/vision_utils.py) without the loop over images."""
    import torch

    if kwargs is not None and (position_ids := kwargs.pop("position_ids", None)) is not None:
        return position_ids
    image, local, _ = _patch_index(grid_thw)
    h, w = grid_thw[image, 1], grid_thw[image, 2]
    if isinstance(spatial_merge_size, int):
        merge: Any = spatial_merge_size
    else:
        merge = spatial_merge_size.to(grid_thw.device)[image]
    frame = local // (h * w)
    within = local % (h * w)
    blocks_w = w // merge
    row = (within // (merge * merge * blocks_w)) * merge + (within // merge) % merge
    col = ((within // (merge * merge)) % blocks_w) * merge + within % merge
    columns = [frame, row, col] if include_temporal else [row, col]
    return torch.stack(columns, dim=-1)


def vision_cu_seqlens(grid_thw: Any, merge_temporal: bool = False, kwargs: dict | None = None) -> Any:
    """``get_vision_cu_seqlens`` (transformers/vision_utils.py) without ``repeat_interleave`` over the grid."""
    import torch
    import torch.nn.functional as F

    if kwargs is not None and (cu_seqlens := kwargs.pop("cu_seqlens", None)) is not None:
        return cu_seqlens
    dtype = grid_thw.dtype if torch.jit.is_tracing() else torch.int32
    if merge_temporal:
        seqlens = grid_thw[:, 0] * grid_thw[:, 1] * grid_thw[:, 2]
    else:
        frames = grid_thw[:, 0]
        ends = frames.cumsum(0)
        frame = torch.arange(frames.sum().item(), device=grid_thw.device)
        image = (frame[:, None] >= ends[None, :]).sum(-1)
        seqlens = (grid_thw[:, 1] * grid_thw[:, 2])[image]
    return F.pad(seqlens.cumsum(dim=0, dtype=dtype), (1, 0), value=0)


def vision_window_index(
    grid_thw: Any, spatial_merge_size: int, window_size: int, patch_size: int, kwargs: dict | None = None
) -> tuple[Any, Any]:
    """``get_vision_window_index`` (transformers/vision_utils.py) without the loop over images.

    Merged tokens are ordered by image, frame, window (row-major over the windows of the frame, the last row and
    column of windows clipped at the grid's edge) and position in the window; a token's rank in that order is the
    tokens of the window rows above it, of the windows left of it in its row, and its offset in its window.
    """
    import torch
    import torch.nn.functional as F

    if kwargs is not None:
        window_index = kwargs.pop("window_index", None)
        cu_window_seqlens = kwargs.pop("cu_window_seqlens", None)
        if window_index is not None and cu_window_seqlens is not None:
            return window_index, cu_window_seqlens
    size = window_size // spatial_merge_size // patch_size
    merged = torch.stack(
        [grid_thw[:, 0], grid_thw[:, 1] // spatial_merge_size, grid_thw[:, 2] // spatial_merge_size], dim=-1
    )
    image, local, counts = _patch_index(merged)
    lh, lw = merged[image, 1], merged[image, 2]
    frame, within = local // (lh * lw), local % (lh * lw)
    row, col = within // lw, within % lw
    band_height = torch.clamp(lh - (row // size) * size, max=size)
    window_width = torch.clamp(lw - (col // size) * size, max=size)
    rank = (row // size) * size * lw + (col // size) * size * band_height + (row % size) * window_width + col % size
    order = (counts.cumsum(0) - counts)[image] + frame * (lh * lw) + rank
    token = torch.arange(order.shape[0], device=grid_thw.device)
    window_index = torch.zeros_like(order).scatter(0, order, token)
    # a window ends after its last token: its rank in the order, +1, in patches (merge unit each)
    last = ((row % size) == band_height - 1) & ((col % size) == window_width - 1)
    ends = torch.where(last, order + 1, torch.zeros_like(order)) * spatial_merge_size**2
    cu_window_seqlens = F.pad(torch.sort(ends).values.to(torch.int32), (1, 0), value=0)
    return window_index, cu_window_seqlens


def segment_ids(cu_seqlens: Any, length: int) -> Any:
    """The segment of each of ``length`` packed positions, from cumulative boundaries ``cu_seqlens`` (sorted or
    not, repeated entries allowed): the number of boundaries at or before the position."""
    import torch

    marks = torch.zeros(length + 1, dtype=torch.int64, device=cu_seqlens.device)
    marks = marks.scatter_add(0, cu_seqlens.long(), torch.ones_like(cu_seqlens, dtype=torch.int64))
    return marks.cumsum(0)[:length]


class _VarlenFunctions:
    """Stands in for ``ALL_ATTENTION_FUNCTIONS`` in a modeling module while its vision attention runs: every
    implementation becomes a varlen one, served by the original function with a block-diagonal mask."""

    def __init__(self, functions: Any) -> None:
        self._functions = functions

    def __getattr__(self, name: str) -> Any:
        return getattr(self._functions, name)

    def __getitem__(self, key: str) -> Any:
        return self._functions[key]

    def get_interface(self, implementation: str, default: Callable[..., Any]) -> Callable[..., Any]:
        attend = self._functions.get_interface(implementation, default)

        def varlen(module: Any, query: Any, key: Any, value: Any, attention_mask: Any = None, **kwargs: Any) -> Any:
            import torch

            cu_seqlens = kwargs.pop("cu_seq_lens_q")
            for name in ("cu_seq_lens_k", "max_length_q", "max_length_k"):
                kwargs.pop(name, None)
            segments = segment_ids(cu_seqlens, query.shape[-2])
            same = segments[:, None] == segments[None, :]
            zero = torch.zeros((), dtype=query.dtype, device=query.device)
            mask = torch.where(same, zero, torch.finfo(query.dtype).min)[None, None]
            return attend(module, query, key, value, mask, **kwargs)

        return varlen


def _always(*args: Any, **kwargs: Any) -> bool:
    return True


def _varlen_forward(original: Callable[..., Any], module_name: str) -> Callable[..., Any]:
    def forward(self: Any, *args: Any, **kwargs: Any) -> Any:
        module = sys.modules[module_name]
        functions = _VarlenFunctions(module.ALL_ATTENTION_FUNCTIONS)
        with (
            patch_attribute(module, "is_flash_attention_requested", _always, reason=_REASON),
            patch_attribute(module, "ALL_ATTENTION_FUNCTIONS", functions, reason=_REASON),
        ):
            return original(self, *args, **kwargs)

    return forward


def _splits_by_lengths(cls: type) -> bool:
    """Whether ``cls.forward`` is a packed vision attention that splits by ``cu_seqlens.tolist()`` unless a varlen
    kernel is requested (the pattern of transformers/models/qwen2_vl/modeling_qwen2_vl.py ``VisionAttention``)."""
    forward = cls.__dict__.get("forward")
    code = getattr(inspect.unwrap(forward), "__code__", None) if forward is not None else None
    if code is None or "cu_seqlens" not in code.co_varnames:
        return False
    module = sys.modules.get(cls.__module__)
    names: set[str] = set()
    codes = [code]
    while codes:  # comprehensions are code objects of their own before Python 3.12
        current = codes.pop()
        names.update(current.co_names)
        codes.extend(c for c in current.co_consts if inspect.iscode(c))
    return (
        {"is_flash_attention_requested", "ALL_ATTENTION_FUNCTIONS", "split", "tolist"} <= names
        and module is not None
        and hasattr(module, "is_flash_attention_requested")
        and hasattr(module, "ALL_ATTENTION_FUNCTIONS")
    )


_HELPERS: dict[str, Callable[..., Any]] = {
    "get_vision_position_ids": vision_position_ids,
    "get_vision_cu_seqlens": vision_cu_seqlens,
    "get_vision_window_index": vision_window_index,
}


@contextlib.contextmanager
def grid_as_input(model: Any) -> Iterator[int]:
    """Apply the patches above to the modeling modules and attention classes ``model`` uses; yields how many."""
    vision_utils = sys.modules.get("transformers.vision_utils")
    classes = {type(module) for module in model.modules()} if hasattr(model, "modules") else set()
    with contextlib.ExitStack() as stack:
        applied = 0
        modules = {sys.modules[cls.__module__] for cls in classes if cls.__module__ in sys.modules}
        for module in sorted(modules, key=lambda m: m.__name__):
            for name, replacement in _HELPERS.items():
                original = getattr(vision_utils, name, None) if vision_utils is not None else None
                if original is not None and getattr(module, name, None) is original:
                    stack.enter_context(patch_attribute(module, name, replacement, reason=_REASON))
                    applied += 1
        for cls in sorted(classes, key=lambda c: c.__qualname__):
            if _splits_by_lengths(cls):
                forward = cls.__dict__["forward"]
                stack.enter_context(
                    patch_attribute(cls, "forward", _varlen_forward(forward, cls.__module__), reason=_REASON)
                )
                applied += 1
        yield applied
