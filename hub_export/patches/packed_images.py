"""Per-image loops of vision encoders and projectors over a grid's values, traced as index arithmetic over patches.

Some encoders reshape each image's patches to its ``h x w`` grid to apply a spatial operation, in a Python loop over
the grid's values (``grid_thw.tolist()``, ``spatial_shapes[i]``): the loop pins the image count and the grid's values
become sizes of the traced graph. Each operation below is local on the grid, so every output patch reads fixed
neighbours of its own image: the patches compute each patch's image, row and column from the grid
(:func:`hub_export.patches.vision_grid._patch_index`), gather the neighbours of all patches at once and apply the
same weights, so the shapes depend only on the number of patches:

* ``Lfm2VlModel.get_image_features`` (transformers/models/lfm2_vl/modeling_lfm2_vl.py): each image's SigLIP2 features
  cut to ``h * w``, pixel-unshuffled by ``downsample_factor`` and projected, one image at a time; the patch gathers
  the ``factor x factor`` block of every merged token of every image and projects them together (one piece: the
  caller concatenates the pieces).
* ``Lfm3VlVisionShortConv.forward`` (transformers/models/lfm3_vl/modeling_lfm3_vl.py): a depthwise 2D convolution
  over each frame's grid (patches in spatial-merge block order), the model passing ``grid_thw.tolist()`` to every
  layer; the patch gathers each patch's ``k x k`` neighbours (zero outside the frame) and applies the kernel, and
  ``Lfm3VlVisionModel.forward``'s own ``.tolist()`` of the grid hands the layers the grid tensor instead.
* ``HunYuanVLVisionTransformer.forward`` (transformers/models/hunyuan_vl/modeling_hunyuan_vl.py): each image's patch
  merger (a ``merge x merge`` strided convolution, a newline token after every row, begin and end tokens) in a loop
  over ``grid_thw.tolist()``; the patch gathers every merged token's window, applies the convolution as a matmul,
  and lays out the tokens, newlines, begins and ends of all images by index.
* ``VideoLlama3VisionModel.pixel_unshuffle`` (transformers/models/video_llama_3/modeling_video_llama_3.py): each
  image's grid (patches in merge-block order) resized by ``F.interpolate(size=(h // m, w // m), mode="bilinear")``
  in a loop over the grid, its merge size ``m`` per image; the patch gathers the four source patches of every
  output token and weighs them as the bilinear kernel does (source ``max(scale * (i + 0.5) - 0.5, 0)``, ``scale =
  h / (h // m)``).

Numbers equal eager's within float rounding (the same products, summed in another order). Where an output's length
is read from the grid's values (LFM2-VL's merged tokens, HunYuan-VL's tokens and newlines, ERNIE-4.5-VL's frame
pairs, VideoLLaMA3's resized grids), it is bounded by the patch count it cannot exceed, so that ExecuTorch can plan
its memory.
"""

from __future__ import annotations

import contextlib
import inspect
import sys
from collections.abc import Callable
from typing import Any

from ._base import patch_attribute

__all__ = [
    "video_llama_3_pixel_unshuffle",
    "hunyuan_vl_vision",
    "lfm2_vl_image_features",
    "lfm3_vl_grid_kept",
    "lfm3_vl_short_conv",
]

_REASON = "a per-image loop over the grid's values pins the image count and the grid"


def lfm2_vl_image_features(original: Callable[..., Any]) -> Callable[..., Any]:
    """``Lfm2VlModel.get_image_features`` over every image at once (``pooler_output``: one piece)."""

    def get_image_features(
        self: Any, pixel_values: Any, spatial_shapes: Any, pixel_attention_mask: Any, **kwargs: Any
    ) -> Any:
        import torch

        outputs = self.vision_tower(
            pixel_values=pixel_values,
            spatial_shapes=spatial_shapes,
            pixel_attention_mask=pixel_attention_mask,
            return_dict=True,
            **kwargs,
        )
        hidden = outputs.last_hidden_state
        batch, length, channels = hidden.shape
        projector = self.multi_modal_projector
        factor = projector.factor
        height, width = spatial_shapes[:, 0], spatial_shapes[:, 1]
        grid = torch.stack([torch.ones_like(height), height // factor, width // factor], dim=-1)
        from .vision_grid import _patch_index

        # each image's h * w patches are among the padded row's `length`: its merged tokens at most length // f^2
        image, local, _ = _patch_index(grid, at_most=batch * (length // (factor * factor)))
        merged_w, w = grid[image, 2], width[image]
        top, left = (local // merged_w) * factor, (local % merged_w) * factor
        inner = torch.arange(factor, device=hidden.device)
        # pixel_unshuffle's channel order: the block's rows, then its columns, then the channels
        source = (top[:, None, None] + inner[None, :, None]) * w[:, None, None] + left[:, None, None] + inner
        source = source + (image * length)[:, None, None]
        features = hidden.reshape(batch * length, channels)[source.reshape(-1)]
        features = features.reshape(source.shape[0], factor * factor * channels)
        if projector.use_layer_norm:
            features = projector.layer_norm(features)
        features = projector.linear_2(projector.act(projector.linear_1(features)))
        outputs.pooler_output = [features]
        return outputs

    from transformers.utils.generic import can_return_tuple  # upstream's decorator: it pops return_dict

    return can_return_tuple(get_image_features)


def _block_index(image_start: Any, frame: Any, row: Any, col: Any, height: Any, width: Any, merge: int) -> Any:
    """The packed index of the patch at ``(frame, row, col)`` of its image, patches in ``merge x merge`` block order
    (the inverse of :func:`hub_export.patches.vision_grid._block_order`)."""
    block = (row // merge) * (width // merge) + col // merge
    return image_start + frame * height * width + block * merge * merge + (row % merge) * merge + col % merge


def lfm3_vl_short_conv(original: Callable[..., Any]) -> Callable[..., Any]:
    """``Lfm3VlVisionShortConv.forward`` with the depthwise convolution over every frame at once (``grid_thw`` a
    tensor: see :func:`lfm3_vl_grid_kept`)."""

    def forward(self: Any, hidden_states: Any, grid_thw: Any, **kwargs: Any) -> Any:
        import torch

        from .vision_grid import _block_order, _patch_index

        if not isinstance(grid_thw, torch.Tensor):
            return original(self, hidden_states, grid_thw, **kwargs)
        conv = self.spatial_conv
        if conv.stride != (1, 1) or conv.dilation != (1, 1) or conv.groups != conv.in_channels:
            return original(self, hidden_states, grid_thw.tolist(), **kwargs)
        input_gate, output_gate, conv_input = self.in_proj(hidden_states).chunk(3, dim=-1)
        gated = input_gate * conv_input
        image, local, counts = _patch_index(grid_thw)
        height, width = grid_thw[image, 1], grid_thw[image, 2]
        merge = self.spatial_merge_size
        frame, row, col = _block_order(local, height, width, merge)
        (kernel_h, kernel_w), (pad_h, pad_w) = conv.kernel_size, conv.padding
        dy = torch.arange(kernel_h, device=gated.device)[:, None] - pad_h
        dx = torch.arange(kernel_w, device=gated.device)[None, :] - pad_w
        rows, cols = row[:, None, None] + dy, col[:, None, None] + dx
        inside = (rows >= 0) & (rows < height[:, None, None]) & (cols >= 0) & (cols < width[:, None, None])
        start = (counts.cumsum(0) - counts)[image]
        index = _block_index(
            start[:, None, None],
            frame[:, None, None],
            rows.clamp(min=0),
            cols.clamp(min=0),
            height[:, None, None],
            width[:, None, None],
            merge,
        )
        index = torch.where(inside, index, torch.zeros_like(index)).reshape(gated.shape[0], -1)
        neighbours = gated[index] * inside.reshape(gated.shape[0], -1, 1).to(gated.dtype)
        weight = conv.weight.reshape(conv.out_channels, kernel_h * kernel_w).t()
        convolved = (neighbours * weight[None]).sum(1)
        if conv.bias is not None:
            convolved = convolved + conv.bias
        return self.out_proj(output_gate * convolved)

    return forward


def lfm3_vl_grid_kept(original: Callable[..., Any]) -> Callable[..., Any]:
    """``Lfm3VlVisionModel.forward`` whose own ``grid_thw.tolist()`` (handed to every layer) returns the tensor."""
    code = getattr(inspect.unwrap(original), "__code__", None)

    def forward(self: Any, *args: Any, **kwargs: Any) -> Any:
        import torch

        from .multimodal import _tensor_classes

        with contextlib.ExitStack() as stack:
            for cls in _tensor_classes():
                tolist = cls.__dict__.get("tolist", torch.Tensor.tolist)

                def kept(tensor: Any, _tolist: Any = tolist) -> Any:
                    frame = sys._getframe(1)
                    return tensor if frame is not None and frame.f_code is code else _tolist(tensor)

                stack.enter_context(patch_attribute(cls, "tolist", kept, reason=_REASON))
            return original(self, *args, **kwargs)

    return forward


def _hunyuan_vl_merged(merger: Any, hidden_states: Any, grid_thw: Any) -> Any:
    """``HunYuanVLVisionPatchMerger`` over every image of the packed ``(1, patches, dim)`` states (one-frame images
    in raster order): each image's ``merge x merge`` convolution, a newline token after every merged row, a begin and
    an end token, concatenated over the images as upstream's loop does."""
    import torch

    from .vision_grid import _patch_index

    states = merger.before_rms(hidden_states)[0]
    dtype = states.dtype
    merge = merger.spatial_merge_size
    device = states.device
    height, width = grid_thw[:, 1], grid_thw[:, 2]
    merged_h, merged_w = height // merge, width // merge
    # the merged tokens: the proj_conv window of each, gathered in the convolution's (channel, row, column) order
    merged_grid = torch.stack([torch.ones_like(height), merged_h, merged_w], dim=-1)
    patches = states.shape[0]  # each image's merged tokens at most its patches // merge^2, rows at most // merge
    image, local, _ = _patch_index(merged_grid, at_most=patches // (merge * merge))
    patch_start = (grid_thw.prod(-1).cumsum(0) - grid_thw.prod(-1))[image]
    top, left = (local // merged_w[image]) * merge, (local % merged_w[image]) * merge
    inner = torch.arange(merge, device=device)
    source = patch_start[:, None, None] + (top[:, None, None] + inner[:, None]) * width[image][:, None, None]
    source = source + left[:, None, None] + inner
    windows = states[source.reshape(-1)].reshape(source.shape[0], merge * merge, -1).transpose(1, 2)
    conv, out = merger.proj_conv, merger.proj_out
    tokens = windows.reshape(source.shape[0], -1) @ conv.weight.reshape(conv.out_channels, -1).t()
    if conv.bias is not None:
        tokens = tokens + conv.bias
    tokens = merger.proj_act(tokens) @ out.weight.reshape(out.out_channels, -1).t()
    if out.bias is not None:
        tokens = tokens + out.bias
    rows = torch.cat([tokens, merger.image_newline.reshape(1, -1).to(dtype)])
    rows = merger.mlp(rows)
    table = torch.cat([rows, merger.image_begin.reshape(1, -1).to(dtype), merger.image_end.reshape(1, -1).to(dtype)])
    # the output sequence: per image, begin, each merged row then a newline, end
    lengths = merged_h * (merged_w + 1) + 2
    out_image, position, _ = _patch_index(
        torch.stack([torch.ones_like(lengths)] * 2 + [lengths], dim=-1),
        at_most=patches // (merge * merge) + patches // merge + 2 * grid_thw.shape[0],
    )
    merged_start = (merged_h * merged_w).cumsum(0) - merged_h * merged_w
    inside = position - 1
    row, col = inside // (merged_w[out_image] + 1), inside % (merged_w[out_image] + 1)
    token = merged_start[out_image] + row * merged_w[out_image] + col
    newline, begin, end = tokens.shape[0], tokens.shape[0] + 1, tokens.shape[0] + 2
    index = torch.where(col == merged_w[out_image], newline, token)
    index = torch.where(position == 0, begin, torch.where(position == lengths[out_image] - 1, end, index))
    return merger.after_rms(table[index])[None]


def hunyuan_vl_vision(original: Callable[..., Any]) -> Callable[..., Any]:
    """``HunYuanVLVisionTransformer.forward`` with the per-image patch merger run over every image at once."""

    def forward(self: Any, pixel_values: Any, grid_thw: Any, **kwargs: Any) -> Any:
        module = sys.modules[type(self).__module__]
        hidden_states = self.embeddings(pixel_values, grid_thw)
        cu_seqlens, max_seqlen = module.get_vision_attention_seqlens(grid_thw, self.config, kwargs=kwargs)
        for layer in self.layers:
            hidden_states = layer(
                hidden_states, cu_seqlens=cu_seqlens, max_seqlen=max_seqlen, attention_mask=None, **kwargs
            )
        return module.BaseModelOutputWithPooling(
            last_hidden_state=hidden_states,
            pooler_output=_hunyuan_vl_merged(self.patch_merger, hidden_states, grid_thw),
        )

    return sys.modules[original.__module__].capture_outputs(forward)


def paddleocr_vl_projector(original: Callable[..., Any]) -> Callable[..., Any]:
    """``PaddleOCRProjector.forward`` with every image's ``merge x merge`` blocks gathered at once (the raster-order
    patches of all images read in block order, then projected together)."""

    def forward(self: Any, image_features: Any, image_grid_thw: Any) -> Any:
        from .vision_grid import _block_order, _patch_index

        merge, other = self.merge_kernel_size
        if merge != other or image_features.dim() != 2:
            return original(self, image_features, image_grid_thw)
        image, local, counts = _patch_index(image_grid_thw, patches=image_features.shape[0])
        height, width = image_grid_thw[image, 1], image_grid_thw[image, 2]
        frame, row, col = _block_order(local, height, width, merge)
        source = (counts.cumsum(0) - counts)[image] + frame * height * width + row * width + col
        features = self.pre_norm(image_features)[source]
        features = features.reshape(-1, merge * merge * features.shape[-1])
        return self.linear_2(self.act(self.linear_1(features)))

    return forward


def ernie4_5_vl_temporal_slicing(original: Callable[..., Any]) -> Callable[..., Any]:
    """``Ernie4_5_VLMoeVariableResolutionResamplerModel._temporal_slicing`` without its loop over the grid: each
    output row's image, frame pair and spatial position from its index, the even and odd frames gathered at once
    (an image, ``t == 1``, reads its one frame twice; a clip of ``t`` frames pairs ``t // 2`` of them, as upstream's
    ``zip`` of the two ranges does)."""

    def _temporal_slicing(self: Any, hidden_states: Any, grid_thw: Any) -> Any:
        import torch

        from .vision_grid import _patch_index

        frames = grid_thw[:, 0]
        spatial = grid_thw[:, 1] * grid_thw[:, 2] // (self.spatial_merge_size**2)
        pairs = torch.where(frames > 1, frames // 2, torch.ones_like(frames))
        rows = torch.stack([pairs, spatial, torch.ones_like(spatial)], dim=-1)
        # a pair of frames per two of the image's rows: at most the merged rows there are
        image, local, _ = _patch_index(rows, at_most=hidden_states.shape[0])
        size = spatial[image]
        pair, within = local // size, local % size
        start = (frames * spatial).cumsum(0) - frames * spatial
        first = start[image] + 2 * pair * size + within
        second = first + torch.where(frames[image] > 1, size, torch.zeros_like(size))
        return torch.cat([hidden_states[first], hidden_states[second]], dim=-1)

    return _temporal_slicing


def _bilinear_source(size: Any, out: Any, index: Any) -> tuple[Any, Any, Any]:
    """The two source indices and the weight of the second for ``index`` of ``out`` resized from ``size`` by
    ``F.interpolate(mode="bilinear", align_corners=False)`` (aten's ``area_pixel_compute_source_index``)."""
    import torch

    scale = size.to(torch.float32) / out.to(torch.float32)
    source = (scale * (index.to(torch.float32) + 0.5) - 0.5).clamp(min=0)
    first = source.to(torch.int64)
    second = first + (first < size - 1).to(torch.int64)
    return first, second, source - first.to(torch.float32)


def video_llama_3_pixel_unshuffle(original: Callable[..., Any]) -> Callable[..., Any]:
    """``VideoLlama3VisionModel.pixel_unshuffle`` over every image at once: each output token the bilinear sample
    of its image's ``h x w`` grid at ``(h // m, w // m)`` (``merge_sizes``: ``m`` per image)."""

    def pixel_unshuffle(self: Any, hidden_states: Any, grid_thw: Any, merge_sizes: Any) -> Any:
        import torch

        from .vision_grid import _patch_index

        merge = merge_sizes.to(grid_thw.device)
        frames, height, width = grid_thw[:, 0], grid_thw[:, 1], grid_thw[:, 2]
        out_h, out_w = height // merge, width // merge
        # each output token samples its image's patches: at most as many as the patches
        image, local, _ = _patch_index(torch.stack([frames, out_h, out_w], dim=-1), at_most=hidden_states.shape[0])
        counts = frames * height * width
        start = (counts.cumsum(0) - counts)[image]
        h, w, m, oh, ow = height[image], width[image], merge[image], out_h[image], out_w[image]
        frame, within = local // (oh * ow), local % (oh * ow)
        top, bottom, down = _bilinear_source(h, oh, within // ow)
        left, right, across = _bilinear_source(w, ow, within % ow)

        def at(row: Any, col: Any) -> Any:
            return hidden_states[_block_index(start, frame, row, col, h, w, m)]

        up, rest = (1 - down)[:, None], down[:, None]
        first, second = (1 - across)[:, None], across[:, None]
        mixed = up * (first * at(top, left) + second * at(top, right))
        return (mixed + rest * (first * at(bottom, left) + second * at(bottom, right))).to(hidden_states.dtype)

    return pixel_unshuffle
