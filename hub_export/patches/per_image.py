"""Per-image loops of multimodal models computed over every image at once, so the image count stays dynamic.

Vision towers and projectors that take images of several sizes padded to one batch walk the images in Python: a
list comprehension over ``zip(pixel_values, image_sizes)``, a loop building each image's positions and its block of
the attention mask. The loop's length is the image count, and each image's crop is read from ``image_sizes`` as
Python integers, so ``torch.export`` pins the image count (and, with the folded trace that follows the data-dependent
guard, the image sizes). Each patch below computes the same values over the padded batch with tensor ops: the
patches an image keeps are selected with a boolean mask (``row < height // patch``, ``col < width // patch``) in the
order the loop visits them (image by image, row-major), so the packed length is one size computed from the inputs.
Numbers are eager's exactly (the same values moved, the same per-token ops).

* ``PixtralVisionModel.forward`` (transformers/models/pixtral/modeling_pixtral.py; the vision tower of Mistral 3,
  LightOnOCR and Mistral Large 4): crops each image's patch grid to ``image_sizes[i] // patch_size``, builds its
  2D rotary positions with ``meshgrid`` per image and the block-diagonal attention mask with
  ``generate_block_attention_mask`` (a Python loop writing one block per image). The patch selects the kept patches
  of every image with one mask, their (row, column) positions likewise, and builds the mask from the image index of
  each patch (``0`` where two patches share an image, the dtype's minimum elsewhere, as upstream).
* ``Mistral3PatchMerger.forward`` (transformers/models/mistral3/modeling_mistral3.py) and its copies
  ``LightOnOcrPatchMerger`` and ``MistralLarge4PatchMerger``: splits the packed features per image and ``unfold``s
  each image's grid into ``spatial_merge_size**2``-patch tokens. The patch finds each packed token's image, row and
  column from the cumulative patch counts, keeps the top-left patch of every whole merge window as the anchor of one
  merged token (in the order ``unfold`` emits them), and gathers the window's patches around it in ``unfold``'s
  channel-major layout.
* ``LightOnOcrModel.get_image_features`` (transformers/models/lighton_ocr/modeling_lighton_ocr.py): splits the
  projected features with a list comprehension over ``image_sizes`` only for ``forward`` to ``torch.cat`` them
  again (the form :func:`~hub_export.patches.multimodal.features_kept_whole` keeps whole, written without
  ``.tolist()``); the patch returns them as one piece.
* ``get_image_features`` of ``LlavaNextModel``, ``LlavaNextVideoModel`` and ``LlavaOnevisionModel``: the "anyres"
  tiles of each image, picked from a table of resolutions and packed per image in Python
  (:mod:`hub_export.patches.anyres`).
* ``combine_image_text_embeddings`` (a module-level function of transformers/models/udop/modeling_udop.py, called
  by ``UdopStack``): unpacks the (row, patch) pairs under each token's box with ``zip(*ind)`` (a Python loop over
  batch x sequence), then keeps each row's other patches by a boolean index in a list comprehension over the batch
  and pads them to ``max_len`` with ``pad_sequence``. :func:`udop_combined` marks the patches under a box with one
  scatter and compacts every row's kept patches (their order kept) with a gather from the cumulative kept counts,
  zeros past a row's count, as ``pad_sequence``.
"""

from __future__ import annotations

import contextlib
import functools
import sys
from collections.abc import Callable, Iterator
from typing import Any

from ..errors import PatchTargetMissing
from .anyres import anyres_image_features
from .modeling import ModelingPatch, symbolic_sizes

__all__ = ["PER_IMAGE_PATCHES", "images_at_once", "merged_patches", "pixtral_patches"]


def pixtral_patches(patch_embeds: Any, image_sizes: Any, patch_size: int) -> tuple[Any, Any, Any]:
    """The kept patches of a padded batch, packed image by image as Pixtral's per-image loop packs them.

    Args:
        patch_embeds: ``(images, hidden, rows, cols)`` convolved patches of the padded images.
        image_sizes: ``(images, 2)`` each image's (height, width) in pixels, or None (every image whole).
        patch_size: Pixels per patch side.

    Returns:
        ``(patches, hidden)`` embeddings, ``(patches, 2)`` (row, column) positions and ``(patches,)`` image index.
    """
    import torch

    images, hidden, rows, cols = patch_embeds.shape
    device = patch_embeds.device
    row = torch.arange(rows, device=device)[None, :, None].expand(images, rows, cols)
    col = torch.arange(cols, device=device)[None, None, :].expand(images, rows, cols)
    image = torch.arange(images, device=device)[:, None, None].expand(images, rows, cols)
    embeds = patch_embeds.permute(0, 2, 3, 1)
    positions = torch.stack([row, col], dim=-1)
    if image_sizes is None:
        return embeds.reshape(-1, hidden), positions.reshape(-1, 2), image.reshape(-1)
    sizes = torch.as_tensor(image_sizes, device=device) // patch_size
    keep = (row < sizes[:, 0, None, None]) & (col < sizes[:, 1, None, None])
    return embeds[keep], positions[keep], image[keep]


def _pixtral_forward(original: Callable[..., Any]) -> Callable[..., Any]:
    module = sys.modules[original.__module__]
    names = ("merge_with_config_defaults", "capture_outputs", "is_flash_attention_requested")
    merge_defaults, capture, flash = (getattr(module, name, None) for name in names)
    if merge_defaults is None or capture is None or flash is None:
        raise PatchTargetMissing(
            f"{original.__module__} no longer imports {', '.join(names)}; the per-image Pixtral patch needs review."
        )

    def forward(self: Any, pixel_values: Any, image_sizes: Any = None, **kwargs: Any) -> Any:
        import torch

        if flash(self.config):  # packed sequence lengths: upstream's own
            return original(self, pixel_values, image_sizes=image_sizes, **kwargs)
        patch_embeds = self.patch_conv(pixel_values.to(dtype=self.patch_conv.weight.dtype))
        embeds, position_ids, image = pixtral_patches(patch_embeds, image_sizes, self.patch_size)
        # sdpa_attention_forward reads `q_length > 1 and attention_mask is None`: a guard on the kept-patch count,
        # a data-dependent size. The mask is given, so the answer is False either way; the hint only lets the trace
        # through (a program traced with it refuses a batch of one patch in all).
        torch._check(embeds.shape[0] > 1)
        patch_embeds = self.ln_pre(embeds.unsqueeze(0))
        position_embeddings = self.patch_positional_embedding(patch_embeds, position_ids)
        dtype = patch_embeds.dtype
        blocks = torch.where(image[:, None] == image[None, :], 0.0, torch.finfo(dtype).min).to(dtype)
        attention_mask = blocks[None, None].expand(patch_embeds.shape[0], 1, -1, -1)
        return self.transformer(
            patch_embeds, attention_mask=attention_mask, position_embeddings=position_embeddings, **kwargs
        )

    return merge_defaults(capture(forward))  # upstream's decorators: config defaults, captured hidden states


def merged_patches(features: Any, image_sizes: Any, patch_size: int, merge: int) -> Any:
    """``(tokens, hidden * merge**2)``: each image's ``merge x merge`` windows of packed patch features, laid out as
    ``torch.nn.functional.unfold`` lays out one image's grid (channel-major, then window row, then window column).

    Args:
        features: ``(patches, hidden)`` features packed image by image, each image's grid row-major.
        image_sizes: ``(images, 2)`` each image's (height, width) in pixels.
        patch_size: Pixels per patch side.
        merge: Patches per merge window side.
    """
    import torch

    device = features.device
    grid = torch.as_tensor(image_sizes, device=device) // patch_size
    heights, widths = grid[:, 0], grid[:, 1]
    counts = heights * widths
    ends = counts.cumsum(0)
    token = torch.arange(features.shape[0], device=device)
    image = (token[:, None] >= ends).sum(-1).clamp(max=grid.shape[0] - 1)
    local = token - (ends - counts)[image]
    width = widths[image]
    row, col = local // width, local % width
    anchor = (row % merge == 0) & (col % merge == 0)
    anchor &= (row < heights[image] // merge * merge) & (col < width // merge * merge)
    anchors = token[anchor]
    offsets = torch.arange(merge, device=device)
    index = anchors[:, None, None] + offsets[None, :, None] * width[anchors][:, None, None] + offsets[None, None, :]
    windows = features[index]  # (tokens, merge, merge, hidden)
    return windows.permute(0, 3, 1, 2).reshape(anchors.shape[0], features.shape[-1] * merge * merge)


def _merger_forward(original: Callable[..., Any]) -> Callable[..., Any]:
    def forward(self: Any, image_features: Any, image_sizes: Any) -> Any:
        merged = merged_patches(image_features, image_sizes, self.patch_size, self.spatial_merge_size)
        return self.merging_layer(merged)

    return forward


def _lighton_features(original: Callable[..., Any]) -> Callable[..., Any]:
    module = sys.modules[original.__module__]
    can_return_tuple = getattr(module, "can_return_tuple", None)
    if can_return_tuple is None:
        raise PatchTargetMissing(
            f"{original.__module__} no longer imports can_return_tuple; the per-image LightOnOCR patch needs review."
        )

    def get_image_features(self: Any, pixel_values: Any, image_sizes: Any, **kwargs: Any) -> Any:
        image_outputs = self.vision_encoder(pixel_values, image_sizes=image_sizes, return_dict=True, **kwargs)
        features = self.vision_projection(image_outputs.last_hidden_state.squeeze(0), image_sizes)
        image_outputs.pooler_output = (features,)  # the caller concatenates the pieces: one piece is the same
        return image_outputs

    return can_return_tuple(get_image_features)


def udop_combined(original: Callable[..., Any]) -> Callable[..., Any]:
    """``combine_image_text_embeddings`` of UDOP over every row at once (see the module docstring)."""

    def combine_image_text_embeddings(
        image_embeddings: Any,
        inputs_embeds: Any,
        bbox: Any,
        visual_bbox: Any,
        attention_mask: Any = None,
        num_patches: int = 14,
        max_len: int = 0,
        image_size: int = 224,
        patch_size: int = 16,
    ) -> tuple[Any, Any, Any]:
        import torch

        module = sys.modules[original.__module__]
        cells = num_patches
        ocr_x = torch.clip(torch.floor((bbox[:, :, 0] + bbox[:, :, 2]) / 2.0 * cells).long(), 0, cells - 1)
        ocr_y = torch.clip(torch.floor((bbox[:, :, 1] + bbox[:, :, 3]) / 2.0 * cells).long(), 0, cells - 1) * cells
        ocr_points = ocr_x + ocr_y
        bbox = bbox.to(torch.float32 if bbox.device.type == "mps" else torch.float64)
        target_seg = (bbox.mean(-1) == 0.0) | (bbox.mean(-1) == 1.0)
        index = ocr_points.unsqueeze(-1).expand(-1, -1, image_embeddings.size(-1))
        repeated = torch.gather(image_embeddings, 1, index).masked_fill(target_seg.unsqueeze(-1), 0.0)
        inputs_embeds += repeated  # in place, as upstream
        patches = image_embeddings.shape[1]
        kept = torch.ones(image_embeddings.shape[:2], dtype=torch.bool, device=image_embeddings.device)
        kept = kept.scatter(1, ocr_points, False)  # upstream: patch_inds[rows, cols] = False
        if visual_bbox is None:
            visual_bbox = module.get_visual_bbox(image_size=image_size, patch_size=patch_size)
            visual_bbox = visual_bbox.unsqueeze(0).repeat(image_embeddings.size(0), 1, 1)
            visual_bbox = visual_bbox.to(image_embeddings.device)
        length = patches if max_len == 0 else max_len - inputs_embeds.size(1)
        # slot j of a row: its (j+1)-th kept patch, found as the count of patches with fewer kept before them
        slots = torch.arange(length, device=kept.device)
        counts = kept.long().cumsum(1)  # (batch, patches)
        source = (counts[:, None, :] <= slots[None, :, None]).sum(-1).clamp(max=patches - 1)  # (batch, length)
        filled = slots[None, :] < counts[:, -1:]

        def compacted(values: Any) -> Any:
            gathered = values.gather(1, source.unsqueeze(-1).expand(-1, -1, values.shape[-1]))
            return torch.where(filled.unsqueeze(-1), gathered, torch.zeros((), dtype=values.dtype))

        inputs_embeds = torch.cat([inputs_embeds, compacted(image_embeddings)], 1)
        bbox = torch.cat([bbox, compacted(visual_bbox)], 1)
        if attention_mask is not None:
            visual_attention_mask = filled.to(attention_mask.dtype)
            attention_mask = torch.cat([attention_mask, visual_attention_mask], 1)
        return inputs_embeds, bbox, attention_mask

    return combine_image_text_embeddings


_TOWER_REASON = (
    "{owner} walks the images in Python (a crop of each image's patch grid to image_sizes, its positions and its "
    "block of the attention mask), pinning the image count"
)
_MERGER_REASON = (
    "{owner} splits the packed features per image and unfolds each image's grid in a Python loop, pinning the "
    "image count"
)

#: the per-image patches, applied by :func:`images_at_once` to the models that hold their class
PER_IMAGE_PATCHES: tuple[ModelingPatch, ...] = (
    ModelingPatch(
        "transformers.models.pixtral.modeling_pixtral",
        "PixtralVisionModel",
        "forward",
        _pixtral_forward,
        _TOWER_REASON.format(owner="PixtralVisionModel.forward"),
    ),
    *(
        ModelingPatch(
            f"transformers.models.{kind}.modeling_{kind}",
            owner,
            "forward",
            _merger_forward,
            _MERGER_REASON.format(owner=f"{owner}.forward"),
        )
        for kind, owner in (
            ("mistral3", "Mistral3PatchMerger"),
            ("lighton_ocr", "LightOnOcrPatchMerger"),
            ("mistral_large4", "MistralLarge4PatchMerger"),
        )
    ),
    ModelingPatch(
        "transformers.models.lighton_ocr.modeling_lighton_ocr",
        "LightOnOcrModel",
        "get_image_features",
        _lighton_features,
        "LightOnOcrModel.get_image_features splits the packed features by a Python list over image_sizes only for "
        "its caller to concatenate them again, pinning the image count",
    ),
    *(
        ModelingPatch(
            f"transformers.models.{kind}.modeling_{kind}",
            owner,
            "get_image_features",
            functools.partial(anyres_image_features, onevision=kind == "llava_onevision"),
            f"{owner}.get_image_features picks each image's tile grid from image_sizes.tolist() and packs the tiles "
            "image by image in Python (select_best_resolution, unpad_image), pinning the image count",
        )
        for kind, owner in (
            ("llava_next", "LlavaNextModel"),
            ("llava_next_video", "LlavaNextVideoModel"),
            ("llava_onevision", "LlavaOnevisionModel"),
        )
    ),
    ModelingPatch(
        "transformers.models.udop.modeling_udop",
        "",
        "combine_image_text_embeddings",
        udop_combined,
        "UDOP's combine_image_text_embeddings unpacks the patch under each token's box with zip(*ind) and keeps each "
        "row's other patches in a list comprehension over the batch, pinning the batch and the sequence",
        holder="UdopStack",
    ),
)


@contextlib.contextmanager
def images_at_once(model: Any) -> Iterator[int]:
    """Apply the per-image patches whose class ``model`` holds; yields how many were applied.

    Raises:
        PatchTargetMissing: A patched class or method is gone from its (imported) modeling module.
    """
    with symbolic_sizes(model, PER_IMAGE_PATCHES) as applied:
        yield applied
