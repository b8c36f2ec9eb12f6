"""hub_export.patches.per_image: Pixtral's vision tower and Mistral 3's patch merger computed over every image at
once equal transformers' per-image loops bit for bit on ragged image sizes, and a traced tower + merger runs other
image counts and sizes with eager's numbers (the image count and sizes stay inputs)."""

from __future__ import annotations

import pytest
import torch

from hub_export.configs import ExportConfig
from hub_export.export.trace import trace
from hub_export.patches.per_image import images_at_once

#: (height, width) in pixels of each image of a padded 32 x 32 batch (4-pixel patches, 2 x 2 merge windows): whole,
#: cropped, odd patch counts the merge windows leave a row or column of, sizes that are not multiples of a patch
SIZES = ([32, 32], [24, 32], [32, 12], [20, 28], [17, 9])


class _TowerAndMerger(torch.nn.Module):
    """What Mistral 3 runs of its images: the Pixtral tower, then the patch merger on its packed output."""

    def __init__(self) -> None:
        super().__init__()
        from transformers import Mistral3Config, PixtralVisionModel
        from transformers.models.mistral3.modeling_mistral3 import Mistral3PatchMerger

        torch.manual_seed(0)
        vision = dict(
            model_type="pixtral",
            hidden_size=16,
            intermediate_size=32,
            num_hidden_layers=1,
            num_attention_heads=2,
            head_dim=8,
            image_size=32,
            patch_size=4,
        )
        config = Mistral3Config(vision_config=vision, spatial_merge_size=2)
        self.tower = PixtralVisionModel(config.vision_config)
        self.merger = Mistral3PatchMerger(config)

    def forward(self, pixel_values: torch.Tensor, image_sizes: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        patches = self.tower(pixel_values, image_sizes=image_sizes).last_hidden_state
        return patches, self.merger(patches.squeeze(0), image_sizes)


@pytest.fixture(scope="module")
def model() -> _TowerAndMerger:
    return _TowerAndMerger().eval()


def _images(sizes: list[list[int]]) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(len(sizes))
    return {"pixel_values": torch.randn(len(sizes), 3, 32, 32, generator=generator), "image_sizes": torch.tensor(sizes)}


def test_patched_loops_equal_transformers(model: _TowerAndMerger) -> None:
    tower, merger = type(model.tower).forward, type(model.merger).forward
    for count in (1, 2, 5):
        inputs = _images(list(SIZES[-count:]))
        with torch.no_grad():
            expected = model(**inputs)
            with images_at_once(model) as applied:
                assert applied == 2
                got = model(**inputs)
        assert all(torch.equal(g, e) for g, e in zip(got, expected))
    assert type(model.tower).forward is tower and type(model.merger).forward is merger  # restored


def test_traced_tower_runs_other_image_counts_and_sizes(model: _TowerAndMerger) -> None:
    traced = trace(model, _images([[32, 32], [32, 32]]), ExportConfig(dynamic=True))
    assert not traced.signature.constants  # image_sizes stays an input
    assert traced.signature.inputs[0].shape[0] == traced.signature.inputs[1].shape[0] != 2  # the image count too
    program = traced.program.module()
    with torch.no_grad():
        for sizes in (SIZES[:3], SIZES[3:], SIZES):
            inputs = _images(list(sizes))
            got, expected = program(*inputs.values()), model(**inputs)
            assert all(torch.allclose(g, e, atol=1e-5) for g, e in zip(got, expected))
