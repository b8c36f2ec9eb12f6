"""hub_export.patches.masks: a causal mask that eager skips on an all-ones mask (then the attention module's
``is_causal=False`` runs bidirectionally) is traced as eager's select, so the export follows eager for an all-ones
mask and for a padded one."""

from __future__ import annotations

import pytest
import torch
from tiny_models import seeded, text_inputs

from hub_export import DynamoConfig, DynamoExporter
from hub_export.patches.masks import causal_mask_skip_kept


def _text_tower(kind: str) -> torch.nn.Module:
    """AIMv2's or CLIP's text tower, one layer (their configs take the same sizes)."""
    import transformers

    config_class, model_class = {
        "aimv2": (transformers.Aimv2TextConfig, transformers.Aimv2TextModel),
        "clip": (transformers.CLIPTextConfig, transformers.CLIPTextModel),
    }[kind]
    config = config_class(
        vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
        max_position_embeddings=32, eos_token_id=63,
    )  # fmt: skip
    return seeded(model_class, config)


def _inputs(batch: int, length: int, pad: int = 0) -> dict[str, torch.Tensor]:
    return text_inputs(batch, length, vocab=60, pad_left=pad, seed=length)


@pytest.mark.parametrize("kind", ["aimv2", "clip"])
def test_all_ones_and_padded_masks_follow_eager(kind: str) -> None:
    """AIMv2's text tower runs bidirectionally on an all-ones mask (its modules say is_causal=False); CLIP's modules
    say the same but its encoder passes is_causal=True, so it stays causal: the export follows each."""
    model = _text_tower(kind)
    sample = _inputs(2, 7)
    exported = DynamoExporter().export(model, sample, config=DynamoConfig(dynamic=True))
    with torch.no_grad():
        for inputs in (sample, _inputs(3, 9), _inputs(3, 9, pad=2)):  # all ones (eager: no mask), then padded
            got, expected = exported(**inputs).last_hidden_state, model(**inputs).last_hidden_state
            torch.testing.assert_close(got, expected, rtol=0, atol=1e-5)


def test_only_non_causal_sdpa_models_are_patched() -> None:
    from transformers import masking_utils
    from transformers.models.aimv2 import modeling_aimv2

    model = _text_tower("aimv2")
    with causal_mask_skip_kept(model) as patched:
        assert patched == 1 and modeling_aimv2.create_causal_mask is not masking_utils.create_causal_mask
    assert modeling_aimv2.create_causal_mask is masking_utils.create_causal_mask  # restored
    model.config._attn_implementation = "eager"  # eager attention never skips the mask: nothing to keep
    with causal_mask_skip_kept(model) as patched:
        assert patched == 0
