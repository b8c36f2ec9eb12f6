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
* ``transformers.vision_utils.get_vision_cu_seqlens`` (also where ``get_vision_attention_seqlens`` calls it inside
  vision_utils): the segment lengths ``repeat_interleave(h * w, t)`` as one length per frame, the frame's image
  found from the cumulative frame counts; within an encoder call the frames are counted in one slot per packed row
  (empty segments past the last frame), so no size is read from the grid's values.
* ``transformers.vision_utils.get_vision_interpolation_indices_and_weights``: each patch's height, width and start
  from its image (cumulative patch counts) instead of three ``repeat_interleave`` over the grid.
* ``transformers.vision_utils.get_vision_window_index``: the window order of each merged token (its window's rank
  among the clipped windows of its frame, then its place in the window) scattered into the permutation; the window
  boundaries one per merged token, in token order (zero for a token that ends no window: empty segments), which
  replaces ``unique_consecutive``; unsorted, as the varlen attention below reads them (no ``sort``: the ExecuTorch
  runtime has no kernel for it), and the encoders' ``torch.argsort(window_index)`` answered with the inverse
  permutation the helper computed.
* The per-model helpers of the same contract some modeling modules define (``get_vision_frame_index``,
  ``get_vision_temporal_merge_index`` in transformers/models/kimi_k25/modeling_kimi_k25.py,
  ``get_vision_pixel_shuffle_index`` in transformers/models/muse_glimmer/modeling_muse_glimmer.py), likewise.
* ``get_audio_cu_seqlens`` of the Qwen3 audio encoders (transformers/models/qwen3_asr/modeling_qwen3_asr.py and
  ``qwen3_omni_moe``): each sample's attention windows in a Python loop over the batch, the window size read with
  ``.item()``; the patch clips ``start + j * window`` to each sample's end for as many windows as there are chunks
  (repeated boundaries: empty segments).
* Every attention module whose forward splits the packed sequence by ``cu_seqlens.tolist()`` when no varlen kernel
  is available (``VisionAttention.forward`` in transformers/models/qwen2_vl/modeling_qwen2_vl.py and its ~30 copies)
  takes its varlen branch instead, served by the model's own attention function (SDPA or eager) with a
  block-diagonal mask built from the segment ids (``cu_seqlens`` scattered as boundary marks, summed): the same
  attention within each segment, one call for all.

A helper's patch count (read from the grid's values) is tied to the encoder's packed input (a forward pre-hook on
each module taking ``grid_thw`` remembers it), so the graph's sizes are the input's. The helpers are patched in the
modeling modules the model's classes come from (they import them by name); eager
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


#: ``(grid_thw, packed patches)`` of the encoder calls in progress (innermost last), from :func:`_remember_patches`
_CALLS: list[tuple[Any, Any]] = []


def _remember_patches(module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    """Forward pre-hook of a module taking ``grid_thw``: remember the grid with the number of packed patches its
    first tensor holds, so the helpers' patch count (read from the grid's values) is known to equal it."""
    try:
        bound = inspect.signature(type(module).forward).bind_partial(module, *args, **kwargs).arguments
    except TypeError:
        bound = {}
    grid = bound.get("grid_thw")
    first = next((v for k, v in bound.items() if k != "self" and hasattr(v, "shape")), None)
    patches = (
        first.shape[0] if grid is not None and first is not None and first is not grid and first.dim() >= 2 else None
    )
    _CALLS.append((grid, patches))


def _forget_patches(module: Any, args: tuple[Any, ...], kwargs: dict[str, Any], output: Any) -> None:
    if _CALLS:
        _CALLS.pop()


def _count(total: Any, grid_thw: Any, per_patch: int = 1) -> Any:
    """``total`` (a count read from ``grid_thw``'s values), tied to the encoder's packed patch count when the grid is
    the one the encoder was called with: the data-dependent size then is the input's, which other ops share."""
    import torch

    for grid, patches in reversed(_CALLS):
        if grid is grid_thw and patches is not None:
            torch._check(total * per_patch == patches)
            return patches // per_patch
    return total


def _patch_index(
    grid_thw: Any, source: Any = None, per_patch: int = 1, patches: Any = None, at_most: Any = None
) -> tuple[Any, Any, Any]:
    """For every patch of the packed sequence: its image, its index within that image, and the images' counts
    (``source``: the encoder's grid ``grid_thw`` was derived from, ``per_patch`` of its patches in each here;
    ``patches``: the packed tensor's own patch count, when the caller holds it, which the grid's total must equal;
    ``at_most``: a size of the inputs the total cannot exceed, which bounds it where it is read from the grid's
    values: ExecuTorch plans memory for the largest total, and a count read from data has no bound of its own)."""
    import torch

    counts = grid_thw[:, 0] * grid_thw[:, 1] * grid_thw[:, 2]
    ends = counts.cumsum(0)
    if patches is not None:
        torch._check(counts.sum().item() == patches)
        total = patches
    else:
        total = _count(counts.sum().item(), grid_thw if source is None else source, per_patch)
        if at_most is not None:
            torch._check(total <= at_most)
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
    frame, row, col = _block_order(local, h, w, merge)
    columns = [frame, row, col] if include_temporal else [row, col]
    return torch.stack(columns, dim=-1)


def _encoder_rows(grid_thw: Any) -> Any:
    """The packed row count of the encoder call ``grid_thw`` came with (:func:`_remember_patches`), or None."""
    for grid, patches in reversed(_CALLS):
        if grid is grid_thw and patches is not None:
            return patches
    return None


def vision_cu_seqlens(grid_thw: Any, merge_temporal: bool = False, kwargs: dict | None = None) -> Any:
    """``get_vision_cu_seqlens`` (transformers/vision_utils.py) without ``repeat_interleave`` over the grid.

    Within an encoder call, every frame holds at least one of the encoder's packed rows, so the frames are counted
    in as many slots as there are rows, the slots past the last frame empty segments (the last boundary repeated):
    the size is the input's, bounded with it, where ``repeat_interleave`` or a count read from the grid would be a
    size read from the data that no export can bound (ExecuTorch plans every buffer at its upper bound)."""
    import torch
    import torch.nn.functional as F

    if kwargs is not None and (cu_seqlens := kwargs.pop("cu_seqlens", None)) is not None:
        return cu_seqlens
    dtype = grid_thw.dtype if torch.jit.is_tracing() else torch.int32
    if merge_temporal:
        seqlens = grid_thw[:, 0] * grid_thw[:, 1] * grid_thw[:, 2]
    else:
        frames, areas = grid_thw[:, 0], grid_thw[:, 1] * grid_thw[:, 2]
        ends = frames.cumsum(0)
        rows = _encoder_rows(grid_thw)
        slots = frames.sum().item() if rows is None else rows
        frame = torch.arange(slots, device=grid_thw.device)
        image = (frame[:, None] >= ends[None, :]).sum(-1)  # the image count past the last frame
        last = frames.shape[0] - 1
        seqlens = torch.where(image <= last, areas[image.clamp(max=last)], torch.zeros_like(image))
    return F.pad(seqlens.cumsum(dim=0, dtype=dtype), (1, 0), value=0)


def vision_interpolation_indices_and_weights(
    grid_thw: Any,
    num_grid_per_side: int,
    mode: str = "bilinear",
    align_corners: bool = False,
    spatial_merge_size: int = 1,
    padding: str = "border",
    kwargs: dict | None = None,
) -> tuple[Any, Any]:
    """``get_vision_interpolation_indices_and_weights`` (transformers/vision_utils.py) with each patch's image
    found from the cumulative patch counts (:func:`_patch_index`, the count tied to the encoder's rows) instead of
    three ``repeat_interleave`` over the grid (an operator outside ExecuTorch's core set, of a size read from the
    data); the taps and weights per axis are upstream's own ``_interpolation_axis_taps_weights``."""
    if kwargs is not None:
        interp_indices = kwargs.pop("interp_indices", None)
        interp_weights = kwargs.pop("interp_weights", None)
        if interp_indices is not None and interp_weights is not None:
            return interp_indices, interp_weights
    taps_weights = sys.modules["transformers.vision_utils"]._interpolation_axis_taps_weights
    image, local, _ = _patch_index(grid_thw)
    heights, widths = grid_thw[image, 1], grid_thw[image, 2]
    _, row, col = _block_order(local, heights, widths, spatial_merge_size)
    side = num_grid_per_side
    h_taps, h_weights = taps_weights(row, heights, side, mode, align_corners, padding)
    w_taps, w_weights = taps_weights(col, widths, side, mode, align_corners, padding)
    n = h_taps.shape[1]
    indices = (h_taps[:, :, None] * side + w_taps[:, None, :]).reshape(-1, n * n)
    weights = (h_weights[:, :, None] * w_weights[:, None, :]).reshape(-1, n * n)
    return indices, weights


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
    image, local, counts = _patch_index(merged, grid_thw, spatial_merge_size**2)
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
    # in token order, not sorted: segment_ids counts the boundaries at or before a position whatever their order
    # (aten.sort has no kernel in the ExecuTorch runtime)
    cu_window_seqlens = F.pad(ends.to(torch.int32), (1, 0), value=0)
    _INVERSES.append((window_index, order))
    return window_index, cu_window_seqlens


#: ``(window_index, order)`` of the :func:`vision_window_index` calls while tracing: ``order`` is the inverse
#: permutation of ``window_index``, what the encoders' ``torch.argsort(window_index)`` computes.
_INVERSES: list[tuple[Any, Any]] = []


def _inverse_argsort(original: Callable[..., Any]) -> Callable[..., Any]:
    """``torch.argsort`` answering the inverse permutation :func:`vision_window_index` already holds for its own
    window index (``reverse_indices = torch.argsort(window_index)``, transformers/models/qwen2_5_vl: ``aten.sort``
    has no kernel in the ExecuTorch runtime), the original's answer for any other tensor."""

    def argsort(input: Any, dim: int = -1, descending: bool = False, **kwargs: Any) -> Any:
        for permutation, inverse in _INVERSES:
            if input is permutation and dim in (0, -1) and not descending:
                return inverse
        return original(input, dim=dim, descending=descending, **kwargs)

    return argsort


def _block_order(local: Any, h: Any, w: Any, merge: Any) -> tuple[Any, Any, Any]:
    """Frame, row and column of each patch from its index within its image, the frame's patches laid out in
    ``merge x merge`` blocks (block-major, as transformers' vision encoders order them)."""
    frame, within = local // (h * w), local % (h * w)
    blocks_w = w // merge
    row = (within // (merge * merge * blocks_w)) * merge + (within // merge) % merge
    col = ((within // (merge * merge)) % blocks_w) * merge + within % merge
    return frame, row, col


def vision_frame_index(grid_thw: Any, kwargs: dict | None = None) -> Any:
    """``get_vision_frame_index`` (transformers/models/kimi_k25/modeling_kimi_k25.py) without the loop: each
    patch's frame, +1 in clips of more than one frame."""
    if kwargs is not None and (frame_index := kwargs.pop("frame_index", None)) is not None:
        return frame_index
    image, local, _ = _patch_index(grid_thw)
    frames, area = grid_thw[image, 0], grid_thw[image, 1] * grid_thw[image, 2]
    return local // area + (frames > 1).long()


def vision_pixel_shuffle_index(grid_thw: Any, merge_size: int, kwargs: dict | None = None) -> Any:
    """``get_vision_pixel_shuffle_index`` (transformers/models/muse_glimmer/modeling_muse_glimmer.py) without the
    loop: for each patch in ``merge_size`` block order, the raster index of its source patch."""
    if kwargs is not None and (index := kwargs.pop("pixel_shuffle_index", None)) is not None:
        return index
    image, local, counts = _patch_index(grid_thw)
    h, w = grid_thw[image, 1], grid_thw[image, 2]
    frame, row, col = _block_order(local, h, w, merge_size)
    return (counts.cumsum(0) - counts)[image] + frame * h * w + row * w + col


def vision_temporal_merge_index(
    grid_thw: Any, kernel_height: int, kernel_width: int, kwargs: dict | None = None
) -> Any:
    """``get_vision_temporal_merge_index`` (transformers/models/kimi_k25/modeling_kimi_k25.py) without the loop:
    row ``m`` holds the ``t x kernel_height * kernel_width`` patches that pool into merged token ``m`` (every clip
    has the same ``t``, as the upstream ``torch.cat`` requires)."""
    import torch

    if kwargs is not None and (index := kwargs.pop("temporal_merge_index", None)) is not None:
        return index
    merged = torch.stack(
        [torch.ones_like(grid_thw[:, 0]), grid_thw[:, 1] // kernel_height, grid_thw[:, 2] // kernel_width], dim=-1
    )
    image, local, _ = _patch_index(merged)
    counts = grid_thw[:, 0] * grid_thw[:, 1] * grid_thw[:, 2]
    h, w, new_w = grid_thw[image, 1], grid_thw[image, 2], merged[image, 2]
    top, left = (local // new_w) * kernel_height, (local % new_w) * kernel_width
    frames = torch.arange(grid_thw[0, 0].item(), device=grid_thw.device)
    inner_h = torch.arange(kernel_height, device=grid_thw.device)
    inner_w = torch.arange(kernel_width, device=grid_thw.device)
    offset = (inner_h[:, None] * w[:, None, None] + inner_w[None, :]).reshape(local.shape[0], 1, -1)
    start = (counts.cumsum(0) - counts)[image] + top * w + left
    return start[:, None, None] + frames[None, :, None] * (h * w)[:, None, None] + offset


def segment_ids(cu_seqlens: Any, length: int) -> Any:
    """The segment of each of ``length`` packed positions, from cumulative boundaries ``cu_seqlens`` (sorted or
    not, repeated entries allowed): the number of boundaries at or before the position."""
    import torch

    marks = torch.zeros(length + 1, dtype=torch.int64, device=cu_seqlens.device)
    # boundaries at or past the end mark nothing that is read: clipped into the last slot, dropped below
    bounds = cu_seqlens.long().clamp(min=0, max=length)
    marks = marks.scatter_add(0, bounds, torch.ones_like(bounds))
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
            length = query.shape[-2]
            if isinstance(length, torch.SymInt) and not length.node.has_hint():
                # a packed length read from the data (the Qwen3 audio encoders' valid frames): SDPA's
                # `q_length > 1 and attention_mask is None` would guard on it; the mask is given, so the answer is
                # False either way, and the hint only lets the trace through (one packed position in all is refused)
                torch._check(length > 1)
            segments = segment_ids(cu_seqlens, length)
            same = segments[:, None] == segments[None, :]
            zero = torch.zeros((), dtype=query.dtype, device=query.device)
            mask = torch.where(same, zero, torch.finfo(query.dtype).min)[None, None]
            return attend(module, query, key, value, mask, **kwargs)

        return varlen


def audio_window_cu_seqlens(output_lengths: Callable[..., Any]) -> Callable[..., Any]:
    """``get_audio_cu_seqlens`` of the Qwen3 audio encoders (transformers/models/qwen3_asr/modeling_qwen3_asr.py,
    ``qwen3_omni_moe``) without its Python loop over the batch and its ``.item()`` of the window size: each sample's
    window boundaries (``start + j * window``, clipped to the sample's end) for as many windows as there are chunks,
    repeated boundaries making empty segments (``output_lengths``: the module's ``_get_feat_extract_output_lengths``).
    """

    def get_audio_cu_seqlens(
        chunk_lengths: Any, feature_lens: Any, n_window_infer: int, n_window: int, kwargs: dict | None = None
    ) -> Any:
        import torch

        if kwargs is not None and (cu_seqlens := kwargs.pop("cu_seqlens", None)) is not None:
            return cu_seqlens
        lengths = output_lengths(feature_lens, n_window)
        window = output_lengths(chunk_lengths, n_window).max() * (n_window_infer // (n_window * 2))
        ends = lengths.cumsum(0)
        steps = torch.arange(chunk_lengths.shape[0] + 1, device=feature_lens.device)  # a window per chunk at most
        bounds = torch.minimum((ends - lengths)[:, None] + steps[None, :] * window, ends[:, None])
        zero = torch.zeros(1, dtype=bounds.dtype, device=bounds.device)
        return torch.cat([zero, bounds.reshape(-1)]).to(torch.int32)

    return get_audio_cu_seqlens


def _audio_windows(module: Any) -> Callable[..., Any] | None:
    """The patched ``get_audio_cu_seqlens`` for a modeling module defining the windowed form, else None."""
    local = getattr(module, "get_audio_cu_seqlens", None)
    output_lengths = getattr(module, "_get_feat_extract_output_lengths", None)
    if local is None or output_lengths is None or getattr(local, "__module__", None) != module.__name__:
        return None
    return audio_window_cu_seqlens(output_lengths) if "n_window_infer" in inspect.signature(local).parameters else None


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
    "get_vision_interpolation_indices_and_weights": vision_interpolation_indices_and_weights,
}

#: the per-model precompute helpers some modeling modules define under these names (same contract: grid in, the
#: tensor out, popped from ``kwargs`` when precomputed), patched where the module defines its own
_LOCAL_HELPERS: dict[str, Callable[..., Any]] = {
    "get_vision_frame_index": vision_frame_index,
    "get_vision_pixel_shuffle_index": vision_pixel_shuffle_index,
    "get_vision_temporal_merge_index": vision_temporal_merge_index,
}


def _uses(module: Any, helpers: Any) -> bool:
    """Whether ``module`` imported a function of the module ``helpers`` by name."""
    return any(getattr(value, "__module__", None) == helpers.__name__ for value in vars(module).values())


@contextlib.contextmanager
def grid_as_input(model: Any) -> Iterator[int]:
    """Apply the patches above to the modeling modules and attention classes ``model`` uses; yields how many."""
    vision_utils = sys.modules.get("transformers.vision_utils")
    classes = {type(module) for module in model.modules()} if hasattr(model, "modules") else set()
    with contextlib.ExitStack() as stack:
        applied = 0
        modules = {sys.modules[cls.__module__] for cls in classes if cls.__module__ in sys.modules}
        originals = {name: getattr(vision_utils, name, None) for name in _HELPERS} if vision_utils else {}
        if vision_utils is not None and any(_uses(module, vision_utils) for module in modules):
            # the helpers call each other through vision_utils' own names (get_vision_attention_seqlens calls
            # get_vision_cu_seqlens): patched there too
            modules.add(vision_utils)
        for module in sorted(modules, key=lambda m: m.__name__):
            for name, replacement in _HELPERS.items():
                original = originals.get(name)
                if original is not None and getattr(module, name, None) is original:
                    stack.enter_context(patch_attribute(module, name, replacement, reason=_REASON))
                    applied += 1
            for name, replacement in _LOCAL_HELPERS.items():
                local = getattr(module, name, None)
                if getattr(local, "__module__", None) == module.__name__:
                    stack.enter_context(patch_attribute(module, name, replacement, reason=_REASON))
                    applied += 1
            audio_windows = _audio_windows(module)
            if audio_windows is not None:
                stack.enter_context(patch_attribute(module, "get_audio_cu_seqlens", audio_windows, reason=_REASON))
                applied += 1
        for module in model.modules():
            forward = getattr(type(module), "forward", None)
            if forward is not None and "grid_thw" in inspect.signature(forward).parameters:
                stack.callback(module.register_forward_pre_hook(_remember_patches, with_kwargs=True).remove)
                stack.callback(module.register_forward_hook(_forget_patches, with_kwargs=True, always_call=True).remove)
        stack.callback(_CALLS.clear)
        stack.callback(_INVERSES.clear)
        if any(getattr(module, "get_vision_window_index", None) is vision_window_index for module in modules):
            import torch

            stack.enter_context(patch_attribute(torch, "argsort", _inverse_argsort(torch.argsort), reason=_REASON))
        for cls in sorted(classes, key=lambda c: c.__qualname__):
            if _splits_by_lengths(cls):
                forward = cls.__dict__["forward"]
                stack.enter_context(
                    patch_attribute(cls, "forward", _varlen_forward(forward, cls.__module__), reason=_REASON)
                )
                applied += 1
        yield applied
