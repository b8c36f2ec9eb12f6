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


def _udop_inputs(batch: int, length: int, seed: int) -> tuple[torch.Tensor, ...]:
    """Image and token embeddings, token boxes (row 0's first box all zeros: a box whose patch is not added) and a
    mask, for a 4 x 4 patch grid."""
    generator = torch.Generator().manual_seed(seed)
    bbox = torch.rand(batch, length, 4, generator=generator)
    bbox[0, 0] = 0.0
    return (
        torch.randn(batch, 16, 5, generator=generator),
        torch.randn(batch, length, 5, generator=generator),
        bbox,
        torch.ones(batch, length, dtype=torch.long),
    )


def test_udop_combined_embeddings_equal_the_row_loop_and_trace() -> None:
    """UDOP's ``combine_image_text_embeddings`` (``zip(*ind)`` over batch x sequence, a list comprehension over the
    rows: "not enough values to unpack" under torch.export) computed over every row equals upstream bit for bit
    (with and without visual boxes, padded to the patch count or cut to ``max_len``), and traced it takes other
    batches and lengths."""
    from transformers.models.udop import modeling_udop

    from hub_export.patches.per_image import udop_combined

    combine = modeling_udop.combine_image_text_embeddings
    patched = udop_combined(combine)
    for seed, (batch, length) in enumerate(((1, 3), (2, 6), (3, 9))):
        image, embeds, bbox, mask = _udop_inputs(batch, length, seed)
        visual = torch.rand(batch, 16, 4, generator=torch.Generator().manual_seed(seed))
        for visual_bbox, max_len in ((None, 0), (visual, 0), (None, length + 7)):
            expected = combine(image, embeds.clone(), bbox, visual_bbox, mask, 4, max_len, 64, 16)
            got = patched(image, embeds.clone(), bbox, visual_bbox, mask, 4, max_len, 64, 16)
            assert all(g.dtype == e.dtype and torch.equal(g, e) for g, e in zip(got, expected))

    class Combined(modeling_udop.UdopStack):  # a UdopStack: the patch applies to models holding one
        def __init__(self) -> None:
            torch.nn.Module.__init__(self)

        def forward(
            self, image: torch.Tensor, embeds: torch.Tensor, bbox: torch.Tensor, mask: torch.Tensor
        ) -> tuple[torch.Tensor, ...]:
            return modeling_udop.combine_image_text_embeddings(image, embeds * 1, bbox, None, mask, 4, 0, 64, 16)

    batch, length = torch.export.Dim("batch", min=1, max=8), torch.export.Dim("length", min=2, max=64)
    shapes = tuple({0: batch, 1: length} if i else {0: batch} for i in range(4))
    with images_at_once(Combined()) as applied:
        assert applied == 1
        program = torch.export.export(Combined(), _udop_inputs(2, 5, 0), dynamic_shapes=shapes, strict=False)
    assert modeling_udop.combine_image_text_embeddings is combine
    inputs = _udop_inputs(3, 8, 1)
    got, expected = program.module()(*inputs), Combined()(*inputs)
    assert all(torch.equal(g, e) for g, e in zip(got, expected))
