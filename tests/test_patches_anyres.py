"""hub_export.patches.anyres: LLaVA-NeXT's and LLaVA-OneVision's "anyres" image features computed over every image
at once equal transformers' per-image loops on images of uneven sizes and aspect ratios (grids picked from the table,
rows or columns unpadded, OneVision's bilinear shrink), and a traced LLaVA-NeXT keeps the image count an input."""

from __future__ import annotations

import pytest
import torch

from hub_export.configs import ExportConfig
from hub_export.export.trace import trace
from hub_export.patches.anyres import best_resolutions
from hub_export.patches.per_image import images_at_once

#: 8-pixel tiles of 4-pixel patches; grids up to 3 x 2 tiles
PINPOINTS = [[8, 16], [16, 8], [16, 16], [24, 16], [8, 24]]
#: (height, width) of each image: square, wide, tall, odd sizes, one that fits no table entry
SIZES = ([8, 8], [10, 30], [30, 10], [7, 19], [23, 17], [40, 12], [16, 15])


def _model(kind: str) -> torch.nn.Module:
    import transformers

    config_class = {"llava_next": "LlavaNextConfig", "llava_onevision": "LlavaOnevisionConfig"}[kind]
    model_class = {"llava_next": "LlavaNextModel", "llava_onevision": "LlavaOnevisionModel"}[kind]
    torch.manual_seed(0)
    vision = dict(
        model_type="clip_vision_model",
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        image_size=8,
        patch_size=4,
        projection_dim=16,
    )
    text = dict(model_type="llama", hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2)
    extra = {}
    if kind == "llava_onevision":  # a canvas over 1.1 tiles of area shrinks; CLIP has a CLS token to drop
        extra = {"vision_aspect_ratio": "anyres_max_1", "vision_feature_select_strategy": "default"}
    config = getattr(transformers, config_class)(
        vision_config=vision, text_config=text, image_grid_pinpoints=PINPOINTS, vision_feature_layer=-1, **extra
    )
    return getattr(transformers, model_class)(config).eval()


def _images(sizes: list[list[int]], tiles: int = 7) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(len(sizes))
    pixels = torch.randn(len(sizes), tiles, 3, 8, 8, generator=generator)
    return {"pixel_values": pixels, "image_sizes": torch.tensor(sizes)}


def test_best_resolutions_equal_select_best_resolution() -> None:
    from transformers.image_processing_utils import select_best_resolution

    sizes = [[h, w] for h in (1, 7, 8, 13, 16, 25, 300) for w in (1, 5, 8, 16, 17, 24, 90)]
    got = best_resolutions(torch.tensor(sizes), PINPOINTS).tolist()
    assert got == [list(select_best_resolution(size, PINPOINTS)) for size in sizes]


@pytest.mark.parametrize("kind", ["llava_next", "llava_onevision"])
def test_patched_features_equal_transformers(kind: str) -> None:
    model = _model(kind)
    original = type(model).get_image_features
    for sizes in (SIZES[:1], SIZES):
        inputs = _images(list(sizes))
        with torch.no_grad():
            expected = torch.cat(model.get_image_features(**inputs).pooler_output)
            with images_at_once(model) as applied:
                assert applied == 1
                got = torch.cat(model.get_image_features(**inputs).pooler_output)
        assert got.shape == expected.shape
        torch.testing.assert_close(got, expected, atol=1e-6, rtol=1e-6)
    assert type(model).get_image_features is original  # restored


class _Features(torch.nn.Module):
    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, pixel_values: torch.Tensor, image_sizes: torch.Tensor) -> torch.Tensor:
        return torch.cat(self.model.get_image_features(pixel_values, image_sizes).pooler_output)


def test_traced_features_run_other_image_counts_and_sizes() -> None:
    model = _Features(_model("llava_next"))
    traced = trace(model, _images([[8, 8], [8, 8]]), ExportConfig(dynamic=True))
    assert not traced.signature.constants  # image_sizes stays an input
    assert traced.signature.inputs[0].shape[0] != 2  # the image count too
    program = traced.program.module()
    with torch.no_grad():
        for sizes in (SIZES[1:4], SIZES):
            inputs = _images(list(sizes))
            (got,) = program(*inputs.values())
            torch.testing.assert_close(got, model(**inputs), atol=1e-5, rtol=1e-5)
