"""hub_export.patches.resized_positions and packed_images: per-image loops over a grid's values (a learned position
table resized per image, a per-frame convolution, per-image merges), computed over every patch at once, give eager's
numbers on ragged grids; a NaFlex SigLIP2 encoder exports with its image count and grids dynamic."""

from __future__ import annotations

import types
from typing import Any

import pytest
import torch
import torch.nn.functional as F

from hub_export.configs import ExportConfig
from hub_export.export.trace import trace
from hub_export.patches.packed_images import (
    _hunyuan_vl_merged,
    ernie4_5_vl_temporal_slicing,
    lfm2_vl_image_features,
    lfm3_vl_short_conv,
    video_llama_3_pixel_unshuffle,
)
from hub_export.patches.resized_positions import (
    cosmos3_edge_resize,
    hunyuan_vl_patch_embed,
    resized_table,
    siglip2_resize,
)

#: ragged grids: several images, sizes above and below the table's side, one video
GRID = [[1, 4, 6], [2, 2, 4], [1, 8, 2]]


@pytest.mark.parametrize(
    ("mode", "align_corners", "antialias"),
    [("bilinear", False, True), ("bilinear", False, False), ("bilinear", True, False), ("bicubic", False, False)],
)
def test_resized_table_is_f_interpolate(mode: str, align_corners: bool, antialias: bool) -> None:
    table = torch.randn(5, 5, 3, generator=torch.Generator().manual_seed(0))
    for height, width in [(1, 1), (3, 7), (5, 5), (12, 2)]:
        expected = (
            F.interpolate(
                table.permute(2, 0, 1)[None],
                size=(height, width),
                mode=mode,
                align_corners=align_corners,
                antialias=antialias,
            )[0]
            .permute(1, 2, 0)
            .reshape(height * width, -1)
        )
        index = torch.arange(height * width)
        sizes = torch.full_like(index, height), torch.full_like(index, width)
        got = resized_table(table, index // width, index % width, *sizes, mode, align_corners, antialias)
        torch.testing.assert_close(got, expected, rtol=0, atol=1e-5)


def test_position_resizes_match_transformers() -> None:
    from transformers.models.cosmos3_edge.modeling_cosmos3_edge import Cosmos3EdgeVisionEmbeddings
    from transformers.models.siglip2.modeling_siglip2 import Siglip2VisionEmbeddings

    table = torch.randn(4, 4, 8, generator=torch.Generator().manual_seed(1))
    shapes = torch.tensor([[2, 3], [4, 4], [6, 2]])
    expected = Siglip2VisionEmbeddings.resize_positional_embeddings(table, shapes, max_length=20)
    got = siglip2_resize(Siglip2VisionEmbeddings.resize_positional_embeddings).__func__(table, shapes, 20)
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-5)
    grid = torch.tensor([[1, 4, 6], [2, 2, 4], [1, 8, 2]])
    expected = Cosmos3EdgeVisionEmbeddings.resize_positional_embeddings(table, grid, 2)
    got = cosmos3_edge_resize(Cosmos3EdgeVisionEmbeddings.resize_positional_embeddings).__func__(table, grid, 2)
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-5)


def test_lfm3_vl_convolution_over_every_frame() -> None:
    from transformers.models.lfm3_vl.configuration_lfm3_vl import Lfm3VlVisionConfig
    from transformers.models.lfm3_vl.modeling_lfm3_vl import Lfm3VlVisionShortConv

    torch.manual_seed(0)
    conv = Lfm3VlVisionShortConv(Lfm3VlVisionConfig(hidden_size=8, conv_kernel_size=3, spatial_merge_size=2), 0)
    grid = torch.tensor(GRID)
    hidden = torch.randn(int(grid.prod(-1).sum()), 8)
    with torch.no_grad():
        expected = conv(hidden, GRID)
        got = lfm3_vl_short_conv(type(conv).forward)(conv, hidden, grid)
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-5)


def _hunyuan_vl_merger(config: Any) -> Any:
    """HunYuan-VL's patch merger, seeded, with its ``image_newline`` / ``image_begin`` / ``image_end`` drawn (they
    are ``torch.empty`` upstream: uninitialized memory, sometimes NaN)."""
    from transformers.models.hunyuan_vl.modeling_hunyuan_vl import HunYuanVLVisionPatchMerger

    torch.manual_seed(0)
    merger = HunYuanVLVisionPatchMerger(config)
    for parameter in (merger.image_newline, merger.image_begin, merger.image_end):
        torch.nn.init.normal_(parameter)
    return merger


def test_hunyuan_vl_merger_and_positions_over_every_image() -> None:
    from transformers.models.hunyuan_vl.configuration_hunyuan_vl import HunYuanVLVisionConfig
    from transformers.models.hunyuan_vl.modeling_hunyuan_vl import HunYuanVLVisionPatchEmbed

    config = HunYuanVLVisionConfig(hidden_size=8, text_hidden_size=12, patch_size=2, max_image_size=8)
    merger, embed = _hunyuan_vl_merger(config), HunYuanVLVisionPatchEmbed(config)
    grid = torch.tensor([[1, 4, 6], [1, 2, 4], [1, 8, 2]])
    pixels = torch.randn(int(grid.prod(-1).sum()), 3 * 2 * 2)
    with torch.no_grad():
        expected = embed(pixels, grid.tolist())
        got = hunyuan_vl_patch_embed(type(embed).forward)(embed, pixels, grid)
        torch.testing.assert_close(got, expected, rtol=0, atol=1e-5)
        pieces = torch.split(expected, grid.prod(-1).tolist(), dim=1)
        expected = torch.cat([merger(piece, size=(h, w)) for piece, (_, h, w) in zip(pieces, grid.tolist())], dim=1)
        torch.testing.assert_close(_hunyuan_vl_merged(merger, got, grid), expected, rtol=0, atol=1e-5)


def test_hunyuan_vl_merged_sizes_are_bounded_by_the_patches() -> None:
    """The merged tokens' count is read from the grid's values (a size without a bound of its own, which ExecuTorch
    cannot plan memory for); exported with the grid an input, every size of the graph is bounded through the patch
    count (merged tokens <= patches / merge^2, rows <= patches / merge, a begin and an end per image)."""
    from transformers.models.hunyuan_vl.configuration_hunyuan_vl import HunYuanVLVisionConfig

    from hub_export.backends.executorch._bounds import upper_bound

    config = HunYuanVLVisionConfig(hidden_size=8, text_hidden_size=12, patch_size=2, max_image_size=8)
    merger = _hunyuan_vl_merger(config).eval()

    class Merged(torch.nn.Module):
        def forward(self, states: torch.Tensor, grid: torch.Tensor) -> torch.Tensor:
            return _hunyuan_vl_merged(merger, states, grid)

    grid = torch.tensor([[1, 4, 6], [1, 2, 4]])
    states = torch.randn(1, int(grid.prod(-1).sum()), 8)
    dim = torch.export.Dim
    program = torch.export.export(
        Merged(), (states, grid), dynamic_shapes=({1: dim("patches", max=1024)}, {0: dim("images", max=16)})
    )
    sizes = [
        size for node in program.graph.nodes if isinstance(v := node.meta.get("val"), torch.Tensor) for size in v.shape
    ]
    assert any(getattr(size, "node", None) is not None and size.node.expr.free_symbols for size in sizes)
    assert all(upper_bound(size) is not None for size in sizes)
    other = torch.tensor([[1, 2, 2], [1, 4, 4], [1, 6, 2]])
    other_states = torch.randn(1, int(other.prod(-1).sum()), 8)
    with torch.no_grad():
        torch.testing.assert_close(
            program.module()(other_states, other), _hunyuan_vl_merged(merger, other_states, other)
        )


def test_lfm2_vl_image_features_in_one_piece() -> None:
    from transformers import Lfm2VlConfig
    from transformers.modeling_outputs import BaseModelOutputWithPooling
    from transformers.models.lfm2_vl.modeling_lfm2_vl import Lfm2VlModel, Lfm2VlMultiModalProjector

    config = Lfm2VlConfig(projector_hidden_size=16)
    config.vision_config.hidden_size, config.text_config.hidden_size = 4, 8
    torch.manual_seed(0)
    hidden = torch.randn(3, 24, 4)
    stub = types.SimpleNamespace(
        vision_tower=lambda **kwargs: BaseModelOutputWithPooling(last_hidden_state=hidden),
        multi_modal_projector=Lfm2VlMultiModalProjector(config),
    )
    shapes = torch.tensor([[4, 6], [2, 4], [4, 2]])
    mask = torch.arange(24)[None] < shapes.prod(-1)[:, None]
    with torch.no_grad():
        expected = Lfm2VlModel.get_image_features(stub, hidden, shapes, mask).pooler_output
        got = lfm2_vl_image_features(Lfm2VlModel.get_image_features)(stub, hidden, shapes, mask).pooler_output
    assert len(got) == 1
    torch.testing.assert_close(got[0], torch.cat(expected), rtol=0, atol=1e-5)


def test_naflex_embeddings_export_with_images_and_grids_dynamic() -> None:
    from transformers import Siglip2VisionConfig
    from transformers.models.siglip2.modeling_siglip2 import Siglip2VisionEmbeddings

    torch.manual_seed(0)
    model = Siglip2VisionEmbeddings(Siglip2VisionConfig(hidden_size=8, patch_size=2, num_patches=16)).eval()
    resize = model.__class__.__dict__["resize_positional_embeddings"]

    def images(shapes: list[list[int]], length: int) -> dict[str, torch.Tensor]:
        return {"pixel_values": torch.randn(len(shapes), length, 12), "spatial_shapes": torch.tensor(shapes)}

    traced = trace(model, images([[4, 4], [2, 6]], 16), ExportConfig(dynamic=True))
    assert not traced.signature.constants
    program = traced.program.module()
    with torch.no_grad():
        for inputs in (images([[3, 5], [6, 2], [1, 4]], 16), images([[5, 5], [2, 3]], 25)):
            expected = model(**inputs)
            torch.testing.assert_close(program(*inputs.values())[0], expected, rtol=0, atol=1e-5)
    assert model.__class__.__dict__["resize_positional_embeddings"] is resize  # restored as the staticmethod it was


def test_paddleocr_vl_projector_exports_with_images_and_grids_dynamic() -> None:
    """PaddleOCR-VL's projector (a per-image 2 x 2 merge in a loop over the grid) traced on two images runs three
    images and a two-frame clip of other sizes, as eager does."""
    from transformers.models.paddleocr_vl.configuration_paddleocr_vl import PaddleOCRVLConfig
    from transformers.models.paddleocr_vl.modeling_paddleocr_vl import PaddleOCRProjector

    config = PaddleOCRVLConfig()
    config.vision_config.hidden_size, config.vision_config.spatial_merge_size = 4, 2
    config.text_config.hidden_size = 6
    torch.manual_seed(0)
    projector = PaddleOCRProjector(config).eval()
    forward = projector.__class__.__dict__["forward"]

    def images(grid: list[list[int]]) -> dict[str, torch.Tensor]:
        thw = torch.tensor(grid)
        return {"image_features": torch.randn(int(thw.prod(-1).sum()), 4), "image_grid_thw": thw}

    traced = trace(projector, images([[1, 2, 4], [1, 4, 4]]), ExportConfig(dynamic=True))
    assert not traced.signature.constants
    program = traced.program.module()
    with torch.no_grad():
        for inputs in (images(GRID), images([[1, 6, 2]])):
            expected = projector(**inputs)
            torch.testing.assert_close(program(*inputs.values())[0], expected, rtol=0, atol=1e-5)
    assert projector.__class__.__dict__["forward"] is forward


def test_ernie4_5_vl_temporal_slicing_over_every_image() -> None:
    """ERNIE-4.5-VL's frame pairing (an image's one frame twice, a clip's even and odd frames) as one gather."""
    from transformers.models.ernie4_5_vl_moe.modeling_ernie4_5_vl_moe import (
        Ernie4_5_VLMoeVariableResolutionResamplerModel as Resampler,
    )

    owner = types.SimpleNamespace(spatial_merge_size=2)
    grid = torch.tensor([[1, 4, 6], [2, 2, 4], [3, 4, 2], [1, 8, 2], [4, 2, 2]])
    hidden = torch.randn(int((grid.prod(-1) // 4).sum()), 5)
    expected = Resampler._temporal_slicing(owner, hidden, grid)
    got = ernie4_5_vl_temporal_slicing(Resampler._temporal_slicing)(owner, hidden, grid)
    assert torch.equal(got, expected)


def test_video_llama_3_resize_over_every_image() -> None:
    """VideoLLaMA3's per-image bilinear resize of the grid to (h // m, w // m) (a loop over the grid before) as one
    gather of four neighbours: eager's numbers for merge sizes 1, 2 and 3 and a clip; exported with the grid an
    input, it takes other grids."""
    from transformers.models.video_llama_3.modeling_video_llama_3 import VideoLlama3VisionModel

    upstream = VideoLlama3VisionModel.pixel_unshuffle
    patched = video_llama_3_pixel_unshuffle(upstream)

    def inputs(grid: list[list[int]], merges: list[int]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        thw = torch.tensor(grid)
        return torch.randn(int(thw.prod(-1).sum()), 5), thw, torch.tensor(merges)

    torch.manual_seed(0)
    for grid, merges in (([[1, 4, 6], [2, 2, 4], [1, 6, 3], [1, 2, 2]], [2, 1, 3, 2]), ([[3, 4, 4]], [1])):
        sample = inputs(grid, merges)
        torch.testing.assert_close(patched(None, *sample), upstream(None, *sample), rtol=0, atol=1e-6)

    class Resize(torch.nn.Module):
        def forward(self, hidden: torch.Tensor, grid: torch.Tensor, merges: torch.Tensor) -> torch.Tensor:
            return patched(None, hidden, grid, merges)

    auto = torch.export.Dim.AUTO
    program = torch.export.export(
        Resize(), inputs([[1, 4, 6], [1, 2, 2]], [2, 1]), dynamic_shapes=({0: auto}, {0: auto}, {0: auto})
    )
    other = inputs([[2, 2, 4], [1, 6, 3], [1, 4, 4]], [1, 3, 2])
    torch.testing.assert_close(program.module()(*other), upstream(None, *other), rtol=0, atol=1e-6)
