"""hub_export.patches.vision_grid: a grid-driven vision encoder (Qwen2.5-VL's: rotary positions, full and windowed
attention over images packed by ``grid_thw``) exports with the grid as an input, and the export runs other image
counts, grids and frame counts with eager's numbers; the patches are restored after tracing."""

from __future__ import annotations

import torch

from hub_export.configs import ExportConfig
from hub_export.export.trace import trace
from hub_export.patches.vision_grid import (
    audio_window_cu_seqlens,
    grid_as_input,
    segment_ids,
    vision_cu_seqlens,
    vision_interpolation_indices_and_weights,
    vision_position_ids,
    vision_window_index,
)


def _encoder() -> torch.nn.Module:
    from transformers import Qwen2_5_VLVisionConfig
    from transformers.models.qwen2_5_vl.modeling_qwen2_5_vl import Qwen2_5_VisionTransformerPretrainedModel

    config = Qwen2_5_VLVisionConfig(
        depth=2,
        hidden_size=32,
        num_heads=2,
        intermediate_size=48,
        out_hidden_size=32,
        in_channels=3,
        patch_size=2,
        temporal_patch_size=1,
        spatial_merge_size=2,
        window_size=8,  # windows of 2 x 2 merged tokens
        fullatt_block_indexes=[1],
    )
    config._attn_implementation = "sdpa"
    torch.manual_seed(0)
    return Qwen2_5_VisionTransformerPretrainedModel(config).eval()


def _images(grid: list[list[int]]) -> dict[str, torch.Tensor]:
    thw = torch.tensor(grid)
    patches = int(thw.prod(-1).sum())
    generator = torch.Generator().manual_seed(patches)
    return {"hidden_states": torch.randn(patches, 3 * 1 * 2 * 2, generator=generator), "grid_thw": thw}


def test_grid_stays_an_input_of_the_export() -> None:
    model = _encoder()
    forward = type(model.blocks[0].attn).forward
    traced = trace(model, _images([[1, 4, 4], [1, 4, 8]]), ExportConfig(dynamic=True))
    assert not traced.folded and not traced.signature.constants  # the grid is not fixed to the sample's values
    # the packed patches are no batch: their own dim, which ExecuTorch bounds by ExecutorchExporter.max_patches
    assert traced.signature.concrete_shape(traced.signature.inputs[0])[0] == "patches"
    from hub_export import ExecutorchConfig, ExecutorchExporter

    bounds = ExecutorchExporter().dynamic_bounds(model, ExecutorchConfig(dynamic=True))
    assert bounds("patches", "hidden_states", 0, 48) == (1, ExecutorchExporter.max_patches)
    program = traced.program.module()
    others = [[[1, 4, 4], [1, 4, 4], [1, 4, 4]], [[2, 6, 10]], [[1, 8, 4], [3, 2, 6]]]
    with torch.no_grad():
        for grid in others:
            inputs = _images(grid)
            expected = model(**inputs)
            got = program(inputs["hidden_states"], inputs["grid_thw"])
            torch.testing.assert_close(got[0], expected.last_hidden_state, rtol=0, atol=1e-4)
            torch.testing.assert_close(got[1], expected.pooler_output, rtol=0, atol=1e-4)
    assert type(model.blocks[0].attn).forward is forward  # restored after tracing


def test_helpers_match_transformers() -> None:
    """The per-patch helpers give transformers' values on ragged grids (videos, sizes not a window multiple)."""
    from transformers import vision_utils

    grid = torch.tensor([[1, 4, 6], [2, 6, 4], [1, 10, 2]])
    assert torch.equal(vision_position_ids(grid, 2), vision_utils.get_vision_position_ids(grid, 2))
    assert torch.equal(
        vision_position_ids(grid, 2, include_temporal=True),
        vision_utils.get_vision_position_ids(grid, 2, include_temporal=True),
    )
    index, cu_windows = vision_window_index(grid, 2, 8, 2)
    expected_index, expected_cu = vision_utils.get_vision_window_index(grid, 2, 8, 2)
    assert torch.equal(index, expected_index)
    patches = int(grid.prod(-1).sum())
    assert torch.equal(segment_ids(cu_windows, patches).unique_consecutive(return_counts=True)[1], expected_cu.diff())
    for mode, align_corners, merge in (("bilinear", False, 1), ("bilinear", True, 2), ("bicubic", False, 2)):
        got = vision_interpolation_indices_and_weights(grid, 5, mode, align_corners, merge)
        expected_taps = vision_utils.get_vision_interpolation_indices_and_weights(grid, 5, mode, align_corners, merge)
        assert all(torch.equal(a, b) for a, b in zip(got, expected_taps, strict=True)), mode
    expected_cu = vision_utils.get_vision_cu_seqlens(grid)
    assert torch.equal(vision_cu_seqlens(grid), expected_cu)


def test_no_size_of_the_export_is_read_from_the_grid() -> None:
    """Every size of the traced encoder is an expression of its input dims: none is read from the grid's values
    (``repeat_interleave`` over the grid, a frame count ``.item()``), which no export could bound (ExecuTorch plans
    each buffer at its upper bound). The attention segments are counted in one slot per packed patch, the slots
    past the last frame empty (the last boundary repeated), with eager's attention; no sort (the window order's
    inverse is the helper's own), which the ExecuTorch runtime has no kernel for."""
    from torch.fx.experimental.symbolic_shapes import free_unbacked_symbols

    argsort = torch.argsort
    traced = trace(_encoder(), _images([[1, 4, 4], [2, 4, 8]]), ExportConfig(dynamic=True))
    assert torch.argsort is argsort  # answered the window index's inverse while tracing only
    read_from_data = set()
    for node in traced.program.graph.nodes:
        assert "repeat_interleave" not in str(node.target), node.format_node()
        assert "sort" not in str(node.target), node.format_node()  # no kernel in the ExecuTorch runtime
        values = node.meta.get("val")
        for value in values if isinstance(values, (tuple, list)) else [values]:
            if isinstance(value, torch.Tensor):
                read_from_data |= free_unbacked_symbols(value.shape)
    assert not read_from_data


def test_audio_windows_match_transformers() -> None:
    """The Qwen3 audio encoders' attention windows, computed without a loop over the batch, give transformers'
    segments on uneven lengths (whole chunks, a remainder, an empty sample, a window of several chunks)."""
    from transformers.models.qwen3_asr import modeling_qwen3_asr as asr

    patched = audio_window_cu_seqlens(asr._get_feat_extract_output_lengths)
    for mask_lengths, infer in (([100, 37, 300], 100), ([0, 250], 200), ([400, 399], 800)):
        frames = 400
        mask = (torch.arange(frames)[None] < torch.tensor(mask_lengths)[:, None]).long()
        chunk_lengths = mask.view(len(mask_lengths), frames // 100, 100).sum(-1).reshape(-1)
        args = (chunk_lengths, mask.sum(-1), infer, 50)
        expected, got = asr.get_audio_cu_seqlens(*args), patched(*args)
        length = int(expected[-1])
        assert torch.equal(
            segment_ids(got, length).unique_consecutive(return_counts=True)[1], expected.diff()[expected.diff() > 0]
        )


def test_models_without_a_grid_are_untouched() -> None:
    with grid_as_input(torch.nn.Linear(2, 2)) as applied:
        assert applied == 0
