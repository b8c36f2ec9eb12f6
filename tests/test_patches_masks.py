"""hub_export.patches.masks: a causal mask that eager skips on an all-ones mask (then the attention module's
``is_causal=False`` runs bidirectionally) is traced as eager's select, so the export follows eager for an all-ones
mask and for a padded one."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from tiny_models import seeded, text_inputs

from hub_export import DynamoConfig, DynamoExporter
from hub_export.patches.masks import causal_mask_skip_kept, mask_functions_broadcast, no_padding_mask_skipped


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


class _NoPaddingMask(torch.nn.Module):
    """An encoder layer's mask call with no padding mask: eager gets None (nothing to mask)."""

    def __init__(self) -> None:
        super().__init__()
        from transformers import PretrainedConfig

        self.config = PretrainedConfig()
        self.config._attn_implementation = "sdpa"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        from transformers.masking_utils import create_bidirectional_mask

        mask = create_bidirectional_mask(config=self.config, inputs_embeds=x, attention_mask=None)
        return x * 2 if mask is None else x


def test_no_padding_mask_is_skipped_while_exporting_as_in_eager() -> None:
    model, x = _NoPaddingMask(), torch.randn(2, 5, 4)
    assert torch.equal(model(x), x * 2)  # eager skips the mask
    traced = torch.export.export(model, (x,), strict=False).module()
    assert torch.equal(traced(x), x)  # the upstream behaviour: an all-True mask built while exporting
    with no_padding_mask_skipped():
        traced = torch.export.export(model, (x,), strict=False).module()
    assert torch.equal(traced(x), x * 2)


class _WindowMask(torch.nn.Module):
    """A padded bidirectional mask with a model's own window function (T5Gemma 2's encoder: ``sdpa_mask`` vmaps it)."""

    def __init__(self) -> None:
        super().__init__()
        from transformers import PretrainedConfig

        self.config = PretrainedConfig()
        self.config._attn_implementation = "sdpa"

    def forward(self, x: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        from transformers.masking_utils import create_bidirectional_mask
        from transformers.models.t5gemma2.modeling_t5gemma2 import sliding_window_mask_function

        window = sliding_window_mask_function(3, is_causal=False)
        return create_bidirectional_mask(
            config=self.config, inputs_embeds=x, attention_mask=attention_mask, and_mask_function=window
        )


def test_a_models_own_mask_function_is_broadcast_and_the_export_saves(tmp_path: Any) -> None:
    """A vmapped mask function traced to flat_apply, which torch.export.save refused (a TreeSpec constant): expanded
    by broadcasting, the program saves and builds eager's mask at other lengths."""
    model = _WindowMask()
    sample = (torch.randn(2, 6, 4), torch.tensor([[1] * 6, [0] * 2 + [1] * 4]))
    length = torch.export.Dim("length", min=2, max=32)
    with mask_functions_broadcast():
        program = torch.export.export(model, sample, dynamic_shapes=({1: length}, {1: length}), strict=False)
    assert not [n for n in program.graph.nodes if "flat_apply" in str(n.target)]
    torch.export.save(program, tmp_path / "mask.pt2")
    for size in (6, 9):
        inputs = (torch.randn(2, size, 4), torch.tensor([[1] * size, [0] * 3 + [1] * (size - 3)]))
        assert torch.equal(program.module()(*inputs), model(*inputs))
