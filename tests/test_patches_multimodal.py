"""hub_export.patches.multimodal: the text side of the Qwen2-VL family keeps the image count, batch and sequence
dynamic: M-RoPE positions computed per token equal transformers' ``get_rope_index`` (its three forms) on ragged,
padded batches of images and videos, a traced rope index and a traced split-then-concatenate of packed features
run other image counts with eager's numbers, and the patches are restored after tracing."""

from __future__ import annotations

import random
import types
from typing import Any

import pytest
import torch

from hub_export.configs import ExportConfig
from hub_export.export.trace import trace
from hub_export.patches import multimodal
from hub_export.patches.multimodal import (
    features_kept_whole,
    rope_index_ernie,
    rope_index_hunyuan_vl,
    rope_index_qwen2,
    rope_index_qwen2_5,
    rope_index_qwen3,
)


def _owner(cls: type) -> types.SimpleNamespace:
    """What ``get_rope_index`` reads of ``self``: the vision config and ``get_vision_position_ids``."""
    vision = types.SimpleNamespace(spatial_merge_size=2, tokens_per_second=3, temporal_merge_size=2)
    owner = types.SimpleNamespace(config=types.SimpleNamespace(vision_config=vision))
    owner.get_vision_position_ids = lambda *args, **kwargs: cls.get_vision_position_ids(owner, *args, **kwargs)
    return owner


def _prompts(rng: random.Random, frames_apart: bool, frames_merged: int = 1) -> tuple[torch.Tensor, ...]:
    """Rows of text with images (type 1) and videos (type 2), odd rows left-padded; Qwen3-VL prompts put text (a
    timestamp) between a video's frames; ERNIE-4.5-VL's grids count ``frames_merged`` frames per video token."""
    rows: list[list[int]] = []
    images: list[list[int]] = []
    videos: list[list[int]] = []
    for _ in range(rng.randint(1, 3)):
        tokens = [0] * rng.randint(1, 3)
        for _ in range(rng.randint(1, 3)):
            t, h, w = rng.randint(1, 3), 2 * rng.randint(1, 3), 2 * rng.randint(1, 3)
            if rng.random() < 0.5:
                images.append([1, h, w])
                tokens += [1] * (h * w // 4)
            else:
                videos.append([t * frames_merged, h, w])
                frame = [2] * (h * w // 4)
                tokens += sum(([*frame, 0] for _ in range(t)), []) if frames_apart else frame * t
            tokens += [0] * rng.randint(1, 2)
        rows.append(tokens)
    length = max(map(len, rows)) + 1
    types_ = torch.zeros(len(rows), length, dtype=torch.long)
    mask = torch.zeros_like(types_)
    for i, tokens in enumerate(rows):
        pad = length - len(tokens) if i % 2 else 0
        types_[i, pad : pad + len(tokens)] = torch.tensor(tokens)
        mask[i, pad : pad + len(tokens)] = 1
    grids = (torch.tensor(images) if images else None, torch.tensor(videos) if videos else None)
    return torch.zeros_like(types_), types_, mask, *grids


@pytest.mark.parametrize("form", ["qwen2_vl", "qwen2_5_vl", "qwen3_vl", "ernie4_5_vl"])
def test_rope_index_equals_transformers(form: str) -> None:
    from transformers.models.ernie4_5_vl_moe.modeling_ernie4_5_vl_moe import Ernie4_5_VLMoeModel
    from transformers.models.qwen2_5_vl.modeling_qwen2_5_vl import Qwen2_5_VLModel
    from transformers.models.qwen2_vl.modeling_qwen2_vl import Qwen2VLModel
    from transformers.models.qwen3_vl.modeling_qwen3_vl import Qwen3VLModel

    cls, replacement = {
        "qwen2_vl": (Qwen2VLModel, rope_index_qwen2),
        "qwen2_5_vl": (Qwen2_5_VLModel, rope_index_qwen2_5),
        "qwen3_vl": (Qwen3VLModel, rope_index_qwen3),
        "ernie4_5_vl": (Ernie4_5_VLMoeModel, rope_index_ernie),
    }[form]
    original, owner = cls.get_rope_index, _owner(cls)
    patched = replacement(original)
    rng = random.Random(form)
    for trial in range(12):
        ids, types_, mask, images, videos = _prompts(rng, form == "qwen3_vl", 2 if form == "ernie4_5_vl" else 1)
        grids = {"image_grid_thw": images, "video_grid_thw": videos}
        if form == "qwen2_5_vl" and videos is not None and trial % 2:
            grids["second_per_grid_ts"] = torch.rand(len(videos)) * 2
        copies = {k: v.clone() if v is not None else None for k, v in grids.items()}  # Qwen3-VL edits its grid
        expected = original(owner, ids, mm_token_type_ids=types_, attention_mask=mask, **copies)
        got = patched(owner, ids, types_, attention_mask=mask, **grids)
        for value, reference in zip(got, expected):
            assert value.dtype == reference.dtype and torch.equal(value, reference)


def _text_side() -> torch.nn.Module:
    """A ``Qwen2VLModel`` (so the rope-index patch applies) reduced to its text side: the rope index, and packed
    features split per image and concatenated again (``get_image_features`` and its caller, a linear 'encoder')."""
    from transformers.models.qwen2_vl.modeling_qwen2_vl import Qwen2VLModel

    class TextSide(Qwen2VLModel):
        def __init__(self) -> None:
            torch.nn.Module.__init__(self)
            self.config = _owner(Qwen2VLModel).config
            self.proj = torch.nn.Linear(6, 5)

        def get_image_features(self, pixel_values: torch.Tensor, image_grid_thw: torch.Tensor) -> Any:
            outputs = types.SimpleNamespace(pooler_output=self.proj(pixel_values), deepstack=[pixel_values.sin()])
            split_sizes = (image_grid_thw.prod(-1) // 4).tolist()
            outputs.pooler_output = torch.split(outputs.pooler_output, split_sizes)
            outputs.deepstack = [torch.split(feature, split_sizes) for feature in outputs.deepstack]  # Qwen3-VL's
            return outputs

        def forward(
            self, input_ids: Any, mm_token_type_ids: Any, image_grid_thw: Any, attention_mask: Any, pixel_values: Any
        ) -> tuple[torch.Tensor, ...]:
            outputs = self.get_image_features(pixel_values, image_grid_thw)
            features = torch.cat(outputs.pooler_output, dim=0) + torch.cat(outputs.deepstack[0], dim=0)[:, :5]
            positions = self.get_rope_index(input_ids, mm_token_type_ids, image_grid_thw, attention_mask=attention_mask)
            return (*positions, features)

    return TextSide().eval()


def _prompts_with_images(batch: int, images_per_row: int, text: int) -> dict[str, torch.Tensor]:
    """Rows of text and images (image ``i`` of a row: a 2 x 4(i+1) grid, 2(i+1) tokens), all rows but the first
    left-padded."""
    row: list[int] = []
    for i in range(images_per_row):
        row += [0] * (text + i) + [1] * (i + 1) * 2
    row += [0] * text
    types_ = torch.tensor([row] * batch)
    grid = torch.tensor([[1, 2, 4 * (i + 1)] for i in range(images_per_row)] * batch)
    mask = torch.ones_like(types_)
    mask[1:, :2] = 0
    rows = int(grid.prod(-1).sum()) // 4
    return {
        "input_ids": torch.zeros_like(types_),
        "mm_token_type_ids": types_,
        "image_grid_thw": grid,
        "attention_mask": mask,
        "pixel_values": torch.randn(rows, 6, generator=torch.Generator().manual_seed(rows)),
    }


def test_traced_text_side_runs_other_image_counts_and_batches() -> None:
    model = _text_side()
    cls = type(model)
    rope_index, features = cls.get_rope_index, cls.get_image_features
    traced = trace(model, _prompts_with_images(2, 2, 3), ExportConfig(dynamic=True))
    assert not traced.signature.constants and all(d.min != d.max for d in traced.signature.dims.values())
    assert cls.get_rope_index is rope_index and cls.get_image_features is features  # restored after tracing
    program = traced.program.module()
    with torch.no_grad():
        for batch, images, text in ((3, 3, 2), (1, 1, 5), (2, 4, 2)):
            inputs = _prompts_with_images(batch, images, text)
            got, expected = program(*inputs.values()), model(**inputs)
            assert all(torch.equal(g, e) for g, e in zip(got, expected))
    with features_kept_whole(model) as applied:
        assert applied == 1
        assert len(model.get_image_features(inputs["pixel_values"], inputs["image_grid_thw"]).pooler_output) == 1
    with features_kept_whole(torch.nn.Linear(2, 2)) as applied:
        assert applied == 0
    with (
        pytest.warns(UserWarning, match="_ReturnsPieces returns one output per image"),
        features_kept_whole(torch.nn.Sequential(model, _ReturnsPieces())) as applied,
    ):
        assert applied == 0  # the pieces are outputs: one per image, left as they are
    with features_kept_whole(torch.nn.Sequential(model, _ReturnsConcatenated())) as applied:
        assert applied == 1  # Mistral 3 returns the features it concatenated again: not pieces
    counted = _CountsRealPatches()
    with features_kept_whole(counted) as applied:
        assert applied == 1
        mask = torch.tensor([[1] * 8, [1] * 4 + [0] * 4])
        assert len(counted.get_image_features(torch.randn(3, 5), mask).pooler_output) == 1


class _ReturnsPieces(torch.nn.Module):
    """A forward returning the per-image pieces (MiniMax-M3-VL's ``image_hidden_states``)."""

    def forward(self, outputs: Any) -> Any:
        return types.SimpleNamespace(image_hidden_states=outputs.pooler_output)


class _ReturnsConcatenated(torch.nn.Module):
    """A forward returning the features it concatenated (Mistral 3's ``image_hidden_states=image_features``)."""

    def forward(self, outputs: Any) -> Any:
        features = torch.cat(outputs.pooler_output, dim=0)
        return types.SimpleNamespace(image_hidden_states=features)


class _CountsRealPatches(torch.nn.Module):
    """Gemma 4's split: each image's tokens counted from its real (unpadded) patches, ``mask.sum(-1) // k``."""

    def get_image_features(self, pixel_values: torch.Tensor, mask: torch.Tensor) -> Any:
        outputs = types.SimpleNamespace(pooler_output=pixel_values)
        split_sizes = (mask.sum(dim=-1) // 4).tolist()
        outputs.pooler_output = torch.split(outputs.pooler_output, split_sizes)
        return outputs


def test_the_running_maximum_of_hunyuan_vl_positions_needs_no_cummax() -> None:
    """``_at_last_mark`` equals ``cummax`` of the marked values (non-decreasing along a row) on random rows, and
    traces to ops every format converts (``aten.cummax`` has no ONNX function and no OpenVINO rule), with a dynamic
    length that runs other lengths with the same numbers."""
    from hub_export.patches.multimodal import _at_last_mark

    generator = torch.Generator().manual_seed(0)

    def rows(batch: int, length: int) -> tuple[torch.Tensor, torch.Tensor]:
        marks = torch.rand(batch, length, generator=generator) < 0.3
        marks[0] = False  # a row without a mark: -1 throughout
        values = torch.randint(0, 3, (batch, length), generator=generator).cumsum(1)  # ties too
        return marks, values

    class Latest(torch.nn.Module):
        def forward(self, marks: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
            return _at_last_mark(marks, values)

    marks, values = rows(3, 17)
    batch, length = torch.export.Dim("batch", min=2, max=8), torch.export.Dim("length", min=2, max=64)
    shapes = ({0: batch, 1: length},) * 2
    program = torch.export.export(Latest(), (marks, values), dynamic_shapes=shapes)
    targets = {str(n.target) for n in program.graph.nodes if n.op == "call_function"}
    assert not any("cummax" in t for t in targets), targets
    for batch, size in ((3, 17), (2, 40), (4, 5)):
        marks, values = rows(batch, size)
        expected = torch.where(marks, values, -1).cummax(1).values
        assert torch.equal(_at_last_mark(marks, values), expected)
        assert torch.equal(program.module()(marks, values), expected)


def test_hunyuan_vl_rope_index_equals_transformers() -> None:
    """HunYuan-VL's own M-RoPE layout (grid rows with a row-end token, image ordinals, runs with or without begin and
    end tokens) per token equals its get_rope_index on left-padded rows with a hole in the mask, two images a row."""
    from transformers.models.hunyuan_vl.modeling_hunyuan_vl import HunYuanVLModel

    owner = _owner(HunYuanVLModel)
    owner.config.text_config = types.SimpleNamespace(rope_parameters={"mrope_section": [1, 1, 1, 1]})
    grids = torch.tensor([[1, 4, 4], [1, 4, 2], [1, 2, 6]])  # 2x3, 2x2 and 1x4 tokens (a row-end token a row)
    rows = [[0, 0, 0] + [1] * 8 + [0, 0] + [1] * 4 + [0], [0] * 6 + [1] * 4 + [0] * 8]
    types_ = torch.tensor(rows)
    mask = torch.ones_like(types_)
    mask[0, :2], mask[1, :3], mask[1, 13] = 0, 0, 0
    ids = torch.zeros_like(types_)
    expected = HunYuanVLModel.get_rope_index(owner, ids, types_, grids, mask)
    got = rope_index_hunyuan_vl(HunYuanVLModel.get_rope_index)(owner, ids, types_, grids, mask)
    assert torch.equal(got[0], expected[0]) and torch.equal(got[1], expected[1])
    assert expected[0][3, 0, 13:17].tolist() == [1] * 4  # the second image of the row: ordinal 1


def _idefics2_image_side() -> torch.nn.Module:
    """An ``Idefics2Model`` (so its ``get_image_features`` runs) reduced to its image side: padding images (all
    zeros) dropped, a linear 'encoder' over 2 x 2 patches, the per-row pieces concatenated again."""
    from transformers.modeling_outputs import BaseModelOutputWithPooling
    from transformers.models.idefics2.modeling_idefics2 import Idefics2Model

    class ImageSide(Idefics2Model):
        get_image_features = Idefics2Model.get_image_features  # a method of this class: features_kept_whole reads it

        def __init__(self) -> None:
            torch.nn.Module.__init__(self)
            self.config = types.SimpleNamespace(vision_config=types.SimpleNamespace(patch_size=2), return_dict=True)
            self.patches = torch.nn.Linear(12, 5)

        @property
        def dtype(self) -> torch.dtype:
            return torch.float32

        def vision_model(self, pixel_values: torch.Tensor, patch_attention_mask: torch.Tensor) -> Any:
            patches = pixel_values.unfold(2, 2, 2).unfold(3, 2, 2).permute(0, 2, 3, 1, 4, 5)
            return BaseModelOutputWithPooling(last_hidden_state=self.patches(patches.reshape(-1, 4, 12)))

        def connector(self, states: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
            return states * attention_mask[..., None]

        def forward(self, pixel_values: torch.Tensor) -> torch.Tensor:
            return torch.cat(self.get_image_features(pixel_values).pooler_output)

    return ImageSide().eval()


def test_idefics2_features_kept_whole_keep_the_batch_dynamic() -> None:
    """Idefics2's split of the features by each row's count of real images (a list as long as the batch) is kept
    whole: traced on two rows of two images, the export runs three rows, one image a padding image."""
    from transformers.models.idefics2.modeling_idefics2 import Idefics2Model
    from transformers.models.smolvlm.modeling_smolvlm import SmolVLMModel

    model = _idefics2_image_side()
    generator = torch.Generator().manual_seed(0)
    traced = trace(model, {"pixel_values": torch.randn(2, 2, 3, 4, 4, generator=generator)}, ExportConfig(dynamic=True))
    assert traced.signature.dims["batch"].max != 2
    other = torch.randn(3, 2, 3, 4, 4, generator=generator)
    other[1, 1] = 0  # a padding image: dropped
    with torch.no_grad():
        expected = model(other)
        got = traced.program.module()(other)[0]
    assert expected.shape == (5 * 4, 5) and torch.equal(got, expected)
    assert type(model).__dict__["get_image_features"] is Idefics2Model.get_image_features  # restored after tracing
    assert multimodal._returns_pieces(SmolVLMModel)  # SmolVLM returns the per-row pieces: they stay


class _SplitsByMethod(torch.nn.Module):
    """Dots3-Note's spelling: the packed features split by the tensor method, ``features.split(split_sizes)``
    (``Tensor.split`` calls ``torch._VF.split_with_sizes``, never ``torch.split``)."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(6, 5)

    def get_image_features(self, pixel_values: torch.Tensor, image_grid_thw: torch.Tensor) -> Any:
        outputs = types.SimpleNamespace(pooler_output=self.proj(pixel_values))
        split_sizes = (image_grid_thw.prod(-1) // 4).tolist()
        outputs.pooler_output = outputs.pooler_output.split(split_sizes)
        return outputs

    def forward(self, pixel_values: torch.Tensor, image_grid_thw: torch.Tensor) -> torch.Tensor:
        return torch.cat(self.get_image_features(pixel_values, image_grid_thw).pooler_output, dim=0).tanh()


def _images(count: int) -> dict[str, torch.Tensor]:
    grid = torch.tensor([[1, 2, 4 * (i + 1)] for i in range(count)])
    rows = int(grid.prod(-1).sum()) // 4
    return {"pixel_values": torch.randn(rows, 6, generator=torch.Generator().manual_seed(rows)), "image_grid_thw": grid}


# each spelling as a features method of its own: ``self.proj(pixel_values)`` split by the grid, every name the
# pattern reads (``split_sizes``, ``tolist``, ``prod``, ``pooler_output``) in its code
def _by_keywords(self: Any, pixel_values: torch.Tensor, grid: torch.Tensor) -> Any:
    outputs = types.SimpleNamespace(pooler_output=self.proj(pixel_values))
    split_sizes = (grid.prod(-1) // 4).tolist()
    outputs.pooler_output = outputs.pooler_output.split(split_size=split_sizes, dim=0)
    return outputs


def _by_split_with_sizes_method(self: Any, pixel_values: torch.Tensor, grid: torch.Tensor) -> Any:
    outputs = types.SimpleNamespace(pooler_output=self.proj(pixel_values))
    split_sizes = (grid.prod(-1) // 4).tolist()
    outputs.pooler_output = outputs.pooler_output.split_with_sizes(split_sizes)
    return outputs


def _by_split_with_sizes_function(self: Any, pixel_values: torch.Tensor, grid: torch.Tensor) -> Any:
    outputs = types.SimpleNamespace(pooler_output=self.proj(pixel_values))
    split_sizes = (grid.prod(-1) // 4).tolist()
    outputs.pooler_output = torch.split_with_sizes(outputs.pooler_output, split_sizes)
    return outputs


def _by_function(self: Any, pixel_values: torch.Tensor, grid: torch.Tensor) -> Any:
    outputs = types.SimpleNamespace(pooler_output=self.proj(pixel_values))
    split_sizes = (grid.prod(-1) // 4).tolist()
    outputs.pooler_output = torch.split(outputs.pooler_output, split_sizes)
    return outputs


def _inline(self: Any, pixel_values: torch.Tensor, grid: torch.Tensor) -> Any:  # Inkling2's: no split_sizes
    outputs = types.SimpleNamespace(pooler_output=self.proj(pixel_values))
    outputs.pooler_output = outputs.pooler_output.split((grid.prod(-1) // 4).tolist())
    return outputs


def test_every_spelling_of_the_split_keeps_the_features_whole() -> None:
    """The packed features stay one piece whichever spelling splits them (the tensor method Dots3-Note uses, the
    function, ``split_with_sizes``, the sizes inline); a traced method spelling runs other image counts with
    eager's numbers; the tensor classes and ``torch`` get their splits back."""
    originals = (torch.split, torch.split_with_sizes, torch.Tensor.__dict__["split"], torch.Tensor.tolist)
    model = _SplitsByMethod().eval()
    traced = trace(model, _images(2), ExportConfig(dynamic=True))
    assert all(d.min != d.max for d in traced.signature.dims.values())
    program = traced.program.module()
    with torch.no_grad():
        for count in (1, 3, 4):
            inputs = _images(count)
            (got,) = program(*inputs.values())
            torch.testing.assert_close(got, model(**inputs), rtol=0, atol=1e-6)
    spellings = (_by_keywords, _by_split_with_sizes_method, _by_split_with_sizes_function, _by_function, _inline)
    for spelling in spellings:
        spelled = type("Spelled", (_SplitsByMethod,), {"get_image_features": spelling})()
        inputs = _images(3)
        with features_kept_whole(spelled) as applied:
            assert applied == 1, spelling
            pieces = spelled.get_image_features(*inputs.values()).pooler_output
            assert len(pieces) == 1 and pieces[0].shape[0] == inputs["pixel_values"].shape[0], spelling
            assert len(torch.arange(6).split([2, 4])) == 2  # other splits are the original's
        assert len(spelled.get_image_features(*inputs.values()).pooler_output) == 3, spelling
    assert (torch.split, torch.split_with_sizes, torch.Tensor.__dict__["split"], torch.Tensor.tolist) == originals
    assert "split_with_sizes" not in torch.Tensor.__dict__


def test_llava_features_listed_per_image_keep_the_image_count_dynamic() -> None:
    """LLaVA without ``image_sizes`` lists the batch of per-image features (``list(image_features)``, one piece per
    image) only for ``forward`` to concatenate them: kept as one piece, an export traced on two images runs three."""
    from tiny_models import llava, llava_inputs
    from transformers.models.llava.modeling_llava import LlavaModel

    model = llava(text_layers=1).model
    with torch.no_grad():  # warm code: Python 3.11 specializes ``list(x)`` and runs the call inside PRECALL
        for _ in range(20):
            model.model.get_image_features(llava_inputs(2, 5)["pixel_values"])
    traced = trace(model, llava_inputs(2, 5), ExportConfig(dynamic=True))
    assert all(dim.max != 2 for dim in traced.signature.dims.values())
    other = llava_inputs(3, 6, pad_left=1, seed=3)
    with torch.no_grad():
        expected = model(**other).logits
        got = traced.program.module()(*other.values())[0]  # logits first
    torch.testing.assert_close(got, expected, atol=1e-4, rtol=1e-4)
    assert LlavaModel.__dict__["get_image_features"] is type(model.model).get_image_features  # restored


def test_models_returning_the_concatenated_features_are_not_taken_for_pieces() -> None:
    """An output keyword that only tests the encoder output in a conditional (LLaVA, Mistral 3) returns the
    concatenated features; one returning the encoder output or its pooler output (SmolVLM, MiniMax-M3-VL) returns
    the per-image pieces."""
    from transformers.models.llava.modeling_llava import LlavaModel
    from transformers.models.minimax_m3_vl.modeling_minimax_m3_vl import MiniMaxM3VLModel
    from transformers.models.mistral3.modeling_mistral3 import Mistral3Model
    from transformers.models.smolvlm.modeling_smolvlm import SmolVLMModel

    assert not multimodal._returns_pieces(LlavaModel) and not multimodal._returns_pieces(Mistral3Model)
    assert multimodal._returns_pieces(SmolVLMModel) and multimodal._returns_pieces(MiniMaxM3VLModel)


def test_only_a_call_listing_the_features_sees_one_piece() -> None:
    """The listing marker changes nothing but ``list(features)`` in the features method itself: a ``for`` loop,
    an unpacking or a ``*`` over a tensor there keeps its pieces, and a method asking a length itself
    (GLM-Image's ``len(image_grid_thw)``) gets no marker at all."""
    from transformers.models.glm_image.modeling_glm_image import GlmImageModel
    from transformers.models.llava.modeling_llava import LlavaModel

    def lists(features: torch.Tensor) -> Any:
        listed = list(features)
        looped = [piece for piece in features]  # the comprehension's own frame: not the method's
        for piece in features:
            looped.append(piece)
        first, *rest = features
        return listed, looped, first, [*features]

    code = lists.__code__
    assert multimodal._lists_features(code)
    assert not multimodal._lists_features(multimodal._splits_features(GlmImageModel.get_image_features))
    assert multimodal._lists_features(multimodal._splits_features(LlavaModel.get_image_features))
    whole = multimodal._whole(lambda self, features: lists(features), code)
    features = torch.arange(24.0).reshape(3, 4, 2)
    listed, looped, first, starred = whole(None, features)
    assert len(listed) == 1 and torch.equal(listed[0], features.flatten(0, 1))
    assert len(looped) == 6 and torch.equal(first, features[0]) and len(starred) == 3
