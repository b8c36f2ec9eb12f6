"""LLaVA-NeXT's "anyres" image features computed over every image at once, so the image count stays dynamic.

LLaVA-NeXT splits each image into a grid of tiles chosen from a table of resolutions (``image_grid_pinpoints``) and
packs the tiles' features image by image. ``get_image_features`` (transformers/models/llava_next/modeling_llava_next.py
and its copies in ``llava_next_video`` and ``llava_onevision``) walks the images in Python: ``image_size_to_num_patches``
and ``get_anyres_image_grid_shape`` call ``select_best_resolution`` (transformers/image_processing_utils.py) on
``image_sizes[i].tolist()``, the tiles are cut per image (``pix_val[:num_patch]``, ``torch.split``), and
``pack_image_features`` lays each image's tile grid out, unpads it to the image's aspect ratio (``unpad_image``),
appends a newline embedding to every row and (LLaVA-OneVision) shrinks a large grid with a bilinear
``interpolate`` to a per-image size. The loop pins the image count, and comparing the sizes read as Python numbers is a
data-dependent guard.

The patch computes the same selection with tensor ops over the (bounded) resolution table: each image's best
resolution is the lexicographic best of (effective resolution, least waste, first in the table), computed for every
table entry at once in float64 as upstream computes it in Python floats. The vision tower runs on every tile of the
padded ``pixel_values`` batch (tiles past an image's count are computed and not read), and each image's output tokens
(its base tile, then its unpadded canvas row by row, each row followed by the newline) are gathered by index from the
tile features: every image gets the slots of the largest canvas the table allows, a mask keeps the ones upstream
emits, and the packed length is one size computed from the inputs. OneVision's shrink reads its four bilinear
neighbours per kept slot with ``interpolate``'s weights (``align_corners=False``). Numbers are eager's within float
rounding (the vision tower sees a batch of another size; LLaVA-NeXT's gathers move values unchanged).

A call passing ``batch_num_images`` (OneVision's multi-image prompts, where only single-image prompts are tiled) runs
upstream's code.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from ..errors import PatchTargetMissing

__all__ = ["anyres_features", "anyres_image_features", "best_resolutions"]

_DECORATORS = ("merge_with_config_defaults", "can_return_tuple", "select_hidden_states")


def best_resolutions(image_sizes: Any, pinpoints: Any) -> Any:
    """``(images, 2)`` the (height, width) ``select_best_resolution`` picks for each image from ``pinpoints``.

    Args:
        image_sizes: ``(images, 2)`` each image's (height, width).
        pinpoints: The table of possible (height, width) resolutions.
    """
    import torch

    table = torch.as_tensor(pinpoints, dtype=torch.long, device=image_sizes.device)  # (K, 2)
    sizes = image_sizes.to(torch.long)
    height, width = sizes[:, 0, None].double(), sizes[:, 1, None].double()  # (images, 1)
    table_h, table_w = table[None, :, 0], table[None, :, 1]  # (1, K)
    scale = torch.minimum(table_w.double() / width, table_h.double() / height)
    down_w, down_h = (width * scale).to(torch.long), (height * scale).to(torch.long)  # int(): truncation
    effective = torch.minimum(down_w * down_h, sizes[:, 1, None] * sizes[:, 0, None])
    wasted = table_w * table_h - effective
    best = effective == effective.max(dim=1, keepdim=True).values
    least = torch.where(best, wasted, wasted.max() + 1)
    best &= least == least.min(dim=1, keepdim=True).values
    choice = best.to(torch.uint8).argmax(dim=1)  # the first of the equals, as the loop's strict comparisons keep
    return table[choice]


def _bilinear_taps(size: Any, out: Any, steps: Any) -> tuple[Any, Any, Any]:
    """Source index pairs and the weight of the second for ``interpolate(mode="bilinear", align_corners=False)``
    from ``size`` to ``out`` positions (per slot tensors), at output positions ``steps``."""
    import torch

    scale = size.float() / out.float()
    source = ((steps.float() + 0.5) * scale - 0.5).clamp(min=0)
    low = source.to(torch.long)
    high = torch.minimum(low + 1, size - 1)
    return low, high, source - low.float()


def anyres_features(
    features: Any,
    first_tile: Any,
    image_sizes: Any,
    grids: Any,
    newline: Any,
    side: int,
    max_grid: tuple[int, int],
    max_num_patches: int | None = None,
) -> Any:
    """``(tokens, hidden)``: every image's base tile then its unpadded tile canvas, row by row, each row ended by
    ``newline``, packed image by image as ``pack_image_features`` packs them.

    Args:
        features: ``(tiles, side * side, hidden)`` projected features of every tile.
        first_tile: ``(images,)`` the index of each image's base tile in ``features``.
        image_sizes: ``(images, 2)`` each image's (height, width) in pixels.
        grids: ``(images, 2)`` each image's tile grid (rows, columns).
        newline: ``(hidden,)`` the row-end embedding, or None.
        side: Patches per tile side.
        max_grid: The largest (rows, columns) of tiles the resolution table allows.
        max_num_patches: OneVision's ``anyres_max_N``: a canvas over ``1.1 x sqrt(N)`` tiles of area is shrunk.
    """
    import torch

    device = features.device
    tiles, tokens, hidden = features.shape
    images = grids.shape[0]
    rows, cols = max_grid[0] * side, max_grid[1] * side + 1
    canvas_h, canvas_w = grids[:, 0] * side, grids[:, 1] * side  # (images,)
    sizes = image_sizes.to(torch.long)
    height, width = sizes[:, 0].double(), sizes[:, 1].double()
    # unpad_image: crop the rows (wider image) or the columns, by the same float arithmetic
    wider = width / height > canvas_w.double() / canvas_h.double()
    scaled_h = torch.round(height * (canvas_w.double() / width) * 1e7) / 1e7
    scaled_w = torch.round(width * (canvas_h.double() / height) * 1e7) / 1e7
    pad_h = torch.div(canvas_h - scaled_h.to(torch.long), 2, rounding_mode="floor")
    pad_w = torch.div(canvas_w - scaled_w.to(torch.long), 2, rounding_mode="floor")
    top = torch.where(wider, pad_h, 0)
    left = torch.where(wider, 0, pad_w)
    kept_h = torch.where(wider, canvas_h - 2 * pad_h, canvas_h)
    kept_w = torch.where(wider, canvas_w, canvas_w - 2 * pad_w)
    out_h, out_w = kept_h, kept_w
    if max_num_patches is not None:  # OneVision: math.sqrt(h * w / (N * side**2)) > 1.1 -> interpolate
        ratio = torch.sqrt((kept_h * kept_w).double() / (max_num_patches * side**2))
        shrink = ratio > 1.1
        out_h = torch.where(shrink, torch.floor(kept_h.double() / ratio).to(torch.long), kept_h)
        out_w = torch.where(shrink, torch.floor(kept_w.double() / ratio).to(torch.long), kept_w)
    row = torch.arange(rows, device=device)[None, :, None]  # output row / column of each slot
    col = torch.arange(cols, device=device)[None, None, :]
    per = (slice(None), None, None)
    keep = (row < out_h[per]) & (col <= out_w[per])
    newline_slot = (col == out_w[per]).expand(images, rows, cols)
    table = features.reshape(tiles * tokens, hidden)
    if newline is not None:
        table = torch.cat([table, newline[None].to(features.device, features.dtype)])
    else:
        keep &= ~newline_slot

    def index_of(r: Any, c: Any) -> Any:  # the feature row of each slot: canvas position (r, c), or the newline
        r, c = r + top[per], c.clamp(max=cols - 2) + left[per]
        tile = first_tile[per] + 1 + torch.div(r, side, rounding_mode="floor") * grids[:, 1][per]
        tile = tile + torch.div(c, side, rounding_mode="floor")
        index = tile * tokens + (r % side) * side + c % side
        return torch.where(newline_slot, tiles * tokens, index).reshape(images, -1)

    base = first_tile[:, None] * tokens + torch.arange(tokens, device=device)[None]  # (images, tokens)
    mask = torch.cat([torch.ones_like(base, dtype=torch.bool), keep.reshape(images, -1)], dim=1)
    index = torch.cat([base, index_of(row, col)], dim=1)[mask]
    if max_num_patches is None:
        return table[index]
    # OneVision's shrink: interpolate(mode="bilinear", align_corners=False) read as four weighted taps per slot
    low_r, high_r, weight_r = _bilinear_taps(kept_h[per], out_h[per], row)
    low_c, high_c, weight_c = _bilinear_taps(kept_w[per], out_w[per], col)
    taps = torch.zeros_like(base, dtype=features.dtype)
    shrunk = torch.cat([taps.bool(), (shrink[per] & ~newline_slot).reshape(images, -1)], dim=1)[mask]
    mixed = 0
    for r, c, weight in (
        (low_r, low_c, (1 - weight_r) * (1 - weight_c)),
        (low_r, high_c, (1 - weight_r) * weight_c),
        (high_r, low_c, weight_r * (1 - weight_c)),
        (high_r, high_c, weight_r * weight_c),
    ):
        tap = torch.cat([base, index_of(r.expand(-1, rows, cols), c.expand(-1, rows, cols))], dim=1)[mask]
        scale = torch.cat([taps, weight.expand(images, rows, cols).reshape(images, -1).to(taps.dtype)], dim=1)[mask]
        mixed = mixed + table[tap] * scale[:, None]
    return torch.where(shrunk[:, None], mixed, table[index])


def anyres_image_features(original: Callable[..., Any], onevision: bool = False) -> Callable[..., Any]:
    """``get_image_features`` of LLaVA-NeXT and LLaVA-NeXT-Video (``onevision``: LLaVA-OneVision's, with its
    shrink of large canvases and its ``batch_num_images``) over every image at once."""
    module = sys.modules[original.__module__]
    merge_defaults, can_return_tuple, select_hidden_states = (getattr(module, name, None) for name in _DECORATORS)
    if merge_defaults is None or can_return_tuple is None or select_hidden_states is None:
        raise PatchTargetMissing(
            f"{original.__module__} no longer imports {', '.join(_DECORATORS)}; the anyres patch needs review."
        )

    def get_image_features(
        self: Any,
        pixel_values: Any,
        image_sizes: Any,
        vision_feature_layer: Any = None,
        vision_feature_select_strategy: Any = None,
        vision_aspect_ratio: Any = None,
        batch_num_images: Any = None,
        **kwargs: Any,
    ) -> Any:
        import torch

        if batch_num_images is not None or pixel_values.dim() not in (4, 5):
            extra = {"vision_aspect_ratio": vision_aspect_ratio, "batch_num_images": batch_num_images}
            return original(
                self,
                pixel_values,
                image_sizes,
                vision_feature_layer=vision_feature_layer,
                vision_feature_select_strategy=vision_feature_select_strategy,
                **(extra if onevision else {}),
                **kwargs,
            )
        config = self.config
        tile = config.vision_config.image_size
        side = tile // config.vision_config.patch_size
        pinpoints = config.image_grid_pinpoints
        image_sizes = torch.as_tensor(image_sizes, device=pixel_values.device)
        best = best_resolutions(image_sizes, pinpoints)
        grids = torch.div(best, tile, rounding_mode="floor")
        counts = torch.div(best + tile - 1, tile, rounding_mode="floor").prod(dim=1) + 1  # image_size_to_num_patches
        if pixel_values.dim() == 5:
            images, per_image = pixel_values.shape[:2]
            first_tile = torch.arange(images, device=pixel_values.device) * per_image
            pixel_values = pixel_values.flatten(0, 1)
        else:
            first_tile = counts.cumsum(0) - counts
        outputs = self.vision_tower(pixel_values, return_dict=True, **kwargs)
        if isinstance(vision_feature_layer, int):
            selected = outputs.hidden_states[vision_feature_layer]
        else:
            selected = torch.cat([outputs.hidden_states[layer] for layer in vision_feature_layer], dim=-1)
        if vision_feature_select_strategy == "default":
            selected = selected[:, 1:]
        features = self.multi_modal_projector(selected)
        max_grid = (max(h // tile for h, _ in pinpoints), max(w // tile for _, w in pinpoints))
        max_num_patches = None
        if onevision:
            max_num_patches = int((vision_aspect_ratio or "anyres_max_9").removeprefix("anyres_max_"))
        packed = anyres_features(
            features, first_tile, image_sizes, grids, self.image_newline, side, max_grid, max_num_patches
        )
        outputs.pooler_output = (packed,)  # the caller concatenates the pieces: one piece is the same
        return outputs

    return merge_defaults(can_return_tuple(select_hidden_states("vision_feature_layer")(get_image_features)))
