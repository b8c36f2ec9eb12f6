"""Multimodal placeholder code that branches on the token values, traced as a check or a select.

A multimodal model writes its encoder's features over the placeholder tokens of the prompt. The number of those
tokens is a value of the input ids, so while tracing it is data-dependent: a Python ``if`` on it raises
``GuardOnDataDependentSymNode``. Most models check the count with ``torch_compilable_check`` (a ``torch._check``
while tracing) and write with ``masked_scatter``, which trace; the patches below bring the others to that form,
with eager's values and errors:

* ``HunYuanVLModel.get_placeholder_mask`` (transformers/models/hunyuan_vl/modeling_hunyuan_vl.py) refuses a
  mismatch with ``if inputs_embeds[mask].numel() != image_features.numel(): raise ValueError``: the same comparison
  through ``torch_compilable_check`` (a ``ValueError`` in eager, a runtime assertion in the graph), as Voxtral's
  and MiniMax-M3-VL's ``get_placeholder_mask`` do.
* ``Ovis2Model.forward`` (transformers/models/ovis2/modeling_ovis2.py) writes each visual indicator's embedding
  over its tokens with ``if mask.any(): inputs_embeds[mask] = feature``: the write with no token is a no-op, so the
  patch writes with ``torch.where`` unconditionally (the same embeddings) and hands the merged embeddings to
  upstream's forward, which runs the language model.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["hunyuan_vl_placeholder_mask", "ovis2_indicators_selected"]


def hunyuan_vl_placeholder_mask(original: Callable[..., Any]) -> Callable[..., Any]:
    """``HunYuanVLModel.get_placeholder_mask`` with its count check through ``torch_compilable_check``."""

    def get_placeholder_mask(self: Any, input_ids: Any, inputs_embeds: Any = None, image_features: Any = None) -> Any:
        import torch
        from transformers.utils.import_utils import torch_compilable_check

        if input_ids is None:
            token = torch.full((), self.config.image_token_id, dtype=torch.long, device=inputs_embeds.device)
            mask = (inputs_embeds == self.get_input_embeddings()(token)).all(-1)
        else:
            mask = input_ids == self.config.image_token_id
        count = mask.sum()
        mask = mask.unsqueeze(-1).expand_as(inputs_embeds).to(inputs_embeds.device)
        if image_features is not None:
            torch_compilable_check(
                inputs_embeds[mask].numel() == image_features.numel(),
                lambda: (
                    f"Image features and image tokens do not match: tokens: {count}, features {image_features.shape[0]}"
                ),
            )
        return mask

    return get_placeholder_mask


def ovis2_indicators_selected(original: Callable[..., Any]) -> Callable[..., Any]:
    """``Ovis2Model.forward`` with the visual indicators written by ``torch.where`` (no branch on the tokens)."""

    def forward(
        self: Any,
        input_ids: Any = None,
        pixel_values: Any = None,
        attention_mask: Any = None,
        position_ids: Any = None,
        past_key_values: Any = None,
        inputs_embeds: Any = None,
        labels: Any = None,
        use_cache: Any = None,
        mm_encoder_outputs: Any = None,
        **kwargs: Any,
    ) -> Any:
        import torch

        common = {
            "attention_mask": attention_mask,
            "position_ids": position_ids,
            "past_key_values": past_key_values,
            "labels": labels,
            "use_cache": use_cache,
            **kwargs,
        }
        images = (mm_encoder_outputs or {}).get("image")
        if input_ids is None or inputs_embeds is not None or (pixel_values is None and images is None):
            return original(  # no images, or embeddings given: upstream's own path
                self,
                input_ids=input_ids,
                pixel_values=pixel_values,
                inputs_embeds=inputs_embeds,
                mm_encoder_outputs=mm_encoder_outputs,
                **common,
            )
        if pixel_values is not None and images is not None:
            raise ValueError("You cannot specify both pixel_values and mm_encoder_outputs at the same time")
        embeds = self.get_input_embeddings()(input_ids)
        if images is None:
            images = self.get_image_features(pixel_values=pixel_values, return_dict=True)
        features = images.pooler_output
        mask = self.get_placeholder_mask(input_ids, inputs_embeds=embeds, image_features=features)
        features = features.to(embeds.device, embeds.dtype)
        embeds = embeds.masked_scatter(mask, features)
        indicators = images.visual_indicator_features.to(embeds.device, embeds.dtype)
        for i, token in enumerate(self.visual_indicator_token_ids):
            embeds = torch.where((input_ids == token).to(embeds.device)[..., None], indicators[i], embeds)
        outputs = original(self, input_ids=None, inputs_embeds=embeds, **common)
        outputs["image_hidden_states"] = features  # upstream returns the features it wrote
        return outputs

    return forward
