"""Learned position-embedding tables resized per image, traced as one weighted gather over the image grid.

Vision encoders that take images of any size (NaFlex SigLIP2, Cosmos-3 Edge, HunYuan-VL) keep a square learned
table of position embeddings and resize it to every image's patch grid with ``F.interpolate(size=(h, w))`` in a
Python loop over ``grid_thw.tolist()`` (or ``spatial_shapes``): the loop pins the image count and the grid's values
become the sizes of the traced graph. ``F.interpolate`` is separable: the embedding of the patch at ``(row, col)``
of an ``h x w`` image is ``sum_ab W_h[row, a] * W_w[col, b] * table[a, b]``, each ``W`` a row of weights over the
table's (static) side. :func:`axis_weights` computes those rows per patch with tensor arithmetic (PyTorch's kernels:
bilinear with its half-pixel or corner alignment, bicubic with ``a = -0.75``, and bilinear with ``antialias=True``,
whose triangle filter widens by the downscale factor and is normalised), so the patches below compute every
image's embeddings at once, their shapes depending only on the packed patch count:

* ``Siglip2VisionEmbeddings.resize_positional_embeddings`` (transformers/models/siglip2/modeling_siglip2.py; also the
  vision tower of LFM2-VL): per image, bilinear antialiased, padded to ``max_length`` with the first position.
* ``Cosmos3EdgeVisionEmbeddings.resize_positional_embeddings`` (transformers/models/cosmos3_edge/
  modeling_cosmos3_edge.py): per packed image, bilinear antialiased, in spatial-merge block order, per frame.
* ``HunYuanVLVisionPatchEmbed.forward`` (transformers/models/hunyuan_vl/modeling_hunyuan_vl.py): per packed image,
  ``config.interpolate_mode``, raster order, per frame.

Numbers equal eager's within float rounding (the same weights, summed in another order), except for an image one
patch wide resized with ``antialias=True``: PyTorch's CPU kernel then returns the first row's value for every row
(torch 2.13), where this computes the resize itself.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["axis_weights", "cosmos3_edge_resize", "hunyuan_vl_patch_embed", "resized_table", "siglip2_resize"]


def axis_weights(index: Any, size: Any, side: int, mode: str, align_corners: bool, antialias: bool) -> Any:
    """``(n, side)`` float32 weights: row ``i`` resamples a ``side``-long axis to ``size[i]`` at output ``index[i]``
    as ``F.interpolate(mode=mode, align_corners=align_corners, antialias=antialias)`` does.

    Raises:
        ValueError: A mode or combination PyTorch's resize kernels do not have here (nearest, area, bicubic with
            antialias): the caller keeps upstream's code for it.
    """
    import torch

    index = index.to(torch.float32)
    size = size.to(torch.float32)
    source = torch.arange(side, device=index.device, dtype=torch.float32)
    if mode == "bilinear" and antialias and not align_corners:
        # aten/src/ATen/native/cpu/UpSampleKernel.cpp (_compute_weights_aa): a triangle filter centred on the output
        # pixel, widened by the downscale factor, normalised over the source pixels it covers
        scale = side / size
        center = scale * (index + 0.5)
        stretch = torch.clamp(scale, min=1.0)
        weights = torch.clamp(1 - ((source[None, :] + 0.5 - center[:, None]) / stretch[:, None]).abs(), min=0)
        return weights / weights.sum(-1, keepdim=True)
    if antialias:
        raise ValueError(f"no traced form of F.interpolate(mode={mode!r}, antialias=True)")
    if align_corners:
        position = index * (side - 1) / torch.clamp(size - 1, min=1)
    else:
        position = (index + 0.5) * (side / size) - 0.5
    if mode == "bilinear":
        # aten upsample_bilinear2d: the source position clamped to the table, two taps with linear weights
        position = position.clamp(0, side - 1)
        return torch.clamp(1 - (source[None, :] - position[:, None]).abs(), min=0)
    if mode == "bicubic":
        # aten upsample_bicubic2d: four taps around floor(position) with Keys' kernel (a = -0.75), the taps clamped
        floor = torch.floor(position)
        offsets = torch.arange(-1, 3, device=index.device)
        taps = (floor.long()[:, None] + offsets).clamp(0, side - 1)
        distance = (position[:, None] - floor[:, None] - offsets).abs()
        a = -0.75
        near = ((a + 2) * distance - (a + 3)) * distance * distance + 1
        far = ((a * distance - 5 * a) * distance + 8 * a) * distance - 4 * a
        kernel = torch.where(distance <= 1, near, far)
        return torch.zeros(index.shape[0], side, device=index.device).scatter_add(1, taps, kernel)
    raise ValueError(f"no traced form of F.interpolate(mode={mode!r})")


def resized_table(
    table: Any, row: Any, col: Any, height: Any, width: Any, mode: str, align_corners: bool, antialias: bool
) -> Any:
    """The embedding of each patch: ``table`` (``(side_h, side_w, dim)``) resized to its image's ``height x width``
    and read at its ``(row, col)`` (all ``(n,)`` tensors), in float32 (eager upcasts too)."""
    side_h, side_w, dim = table.shape
    rows = axis_weights(row, height, side_h, mode, align_corners, antialias)
    cols = axis_weights(col, width, side_w, mode, align_corners, antialias)
    weights = (rows[:, :, None] * cols[:, None, :]).reshape(row.shape[0], side_h * side_w)
    return weights @ table.reshape(side_h * side_w, dim).float()


def siglip2_resize(original: Callable[..., Any]) -> Any:
    """``Siglip2VisionEmbeddings.resize_positional_embeddings`` over every image at once (a static method)."""

    def resize_positional_embeddings(positional_embeddings: Any, spatial_shapes: Any, max_length: int) -> Any:
        import torch

        batch = spatial_shapes.shape[0]
        height, width = spatial_shapes[:, 0, None], spatial_shapes[:, 1, None]
        position = torch.arange(max_length, device=spatial_shapes.device)[None, :]
        # padding positions repeat the image's first embedding, as upstream fills them
        position = torch.where(position < height * width, position, torch.zeros_like(position))
        height, width = height.expand(batch, max_length), width.expand(batch, max_length)
        row, col = (position // width).reshape(-1), (position % width).reshape(-1)
        resized = resized_table(
            positional_embeddings, row, col, height.reshape(-1), width.reshape(-1), "bilinear", False, True
        )
        return resized.reshape(batch, max_length, -1).to(positional_embeddings.dtype)

    return staticmethod(resize_positional_embeddings)


def cosmos3_edge_resize(original: Callable[..., Any]) -> Any:
    """``Cosmos3EdgeVisionEmbeddings.resize_positional_embeddings`` over the packed patches (a static method)."""

    def resize_positional_embeddings(positional_embeddings: Any, grid_thw: Any, spatial_merge_size: int) -> Any:
        from .vision_grid import _block_order, _patch_index

        image, local, _ = _patch_index(grid_thw)
        height, width = grid_thw[image, 1], grid_thw[image, 2]
        _, row, col = _block_order(local, height, width, spatial_merge_size)
        resized = resized_table(positional_embeddings, row, col, height, width, "bilinear", False, True)
        return resized.to(positional_embeddings.dtype)

    return staticmethod(resize_positional_embeddings)


def hunyuan_vl_patch_embed(original: Callable[..., Any]) -> Callable[..., Any]:
    """``HunYuanVLVisionPatchEmbed.forward`` with the position grid resized for every packed patch at once."""

    def forward(self: Any, pixel_values: Any, grid_thw: Any) -> Any:
        import torch

        from .vision_grid import _block_order, _patch_index

        mode = self.config.interpolate_mode
        if mode not in ("bilinear", "bicubic") or not isinstance(grid_thw, torch.Tensor):
            return original(self, pixel_values, grid_thw)
        num_patches = pixel_values.shape[0]
        pixels = pixel_values.reshape(num_patches, self.config.num_channels, self.patch_size, self.patch_size)
        embeddings = self.patch_embedding(pixels.to(dtype=self.patch_embedding.weight.dtype)).reshape(num_patches, -1)
        image, local, _ = _patch_index(grid_thw)
        height, width = grid_thw[image, 1], grid_thw[image, 2]
        _, row, col = _block_order(local, height, width, 1)
        edge = self.position_edge
        table = self.position_embedding.weight[1:, :].reshape(edge, edge, self.embed_dim)
        positions = resized_table(table, row, col, height, width, mode, False, False)
        return (embeddings + positions.to(embeddings.dtype)).unsqueeze(0)

    return forward
