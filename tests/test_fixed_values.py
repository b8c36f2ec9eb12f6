"""Integer inputs whose values drive shapes (an image grid): the export is built for the sample's values.

Models that split their tokens by sizes read from an integer input's values (LLaVA-Next's ``image_sizes``; the
Qwen-VL family's ``grid_thw`` before :mod:`hub_export.patches.vision_grid`, tested in test_patches_vision_grid.py)
hit guards ``torch.export`` cannot trace (``GuardOnDataDependentSymNode``). The trace then fixes those inputs to the sample's values (``constants`` of the
signature), and a call with other values is refused with one :class:`~hub_export.errors.InputBoundsError`.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from hub_export import DynamoConfig, DynamoExporter, ExportedModel
from hub_export.errors import InputBoundsError, InputError
from hub_export.signature import fixed_tensor, is_fixed


class _SplitByGrid(torch.nn.Module):
    """Pools each image's tokens over its width, the images' ``(h, w)`` read from ``grid``'s values."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(4, 3)

    def forward(self, hidden_states: torch.Tensor, grid: torch.Tensor) -> torch.Tensor:
        sizes = grid.tolist()
        parts = torch.split(self.proj(hidden_states), [h * w for h, w in sizes])
        pooled = []
        for (h, w), part in zip(sizes, parts):
            image = part.reshape(h, w, -1)
            pooled.append(image.mean(1) if w > 1 else image[:, 0])  # a branch on a value: a data-dependent guard
            if int(torch.arange(h * w).reshape(h, w)[:, -1].max()) > 4:  # a factory sized by a value (window index)
                pooled[-1] = pooled[-1] * 2
        return torch.cat(pooled)


class _MaskedLengths(torch.nn.Module):
    """Averages each row's first ``n`` frames, ``n`` read from a mask viewed by the batch size (an audio encoder's
    chunk lengths): the mask's values are fixed only at the sample's sizes."""

    def forward(self, input_features: torch.Tensor, features_mask: torch.Tensor) -> torch.Tensor:
        lengths = features_mask.view(input_features.shape[0], -1).sum(-1).tolist()
        rows = [input_features[i, :n].mean(0) if n > 1 else input_features[i, 0] for i, n in enumerate(lengths)]
        return torch.stack(rows)


class _UsesLengthsAsData(torch.nn.Module):
    """Reads an integer input only as data: it stays a graph input."""

    def forward(self, hidden_states: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        return hidden_states * lengths[:, None].float()


def _grid_sample() -> dict[str, torch.Tensor]:
    return {"hidden_states": torch.randn(10, 4), "grid": torch.tensor([[2, 3], [1, 4]])}


def _export(model: torch.nn.Module, sample: dict[str, torch.Tensor]) -> ExportedModel:
    return DynamoExporter().export(model, sample, config=DynamoConfig(dynamic=True))


def test_values_that_drive_shapes_are_fixed(tmp_path: Path) -> None:
    model = _SplitByGrid().eval()
    sample = _grid_sample()
    with pytest.warns(UserWarning, match=r"derives sizes from the values of 'grid'"):
        exported = _export(model, sample)
    signature = exported.components["model"].metadata.signature
    assert signature.input_names == ["hidden_states"]
    assert is_fixed(signature.constants["grid"])
    assert torch.equal(fixed_tensor(signature.constants["grid"]), sample["grid"])
    exported.save_pretrained(tmp_path)
    loaded = ExportedModel.from_pretrained(tmp_path)  # the fixed values survive export.json
    assert loaded.components["model"].metadata.signature.constants == signature.constants
    for runner in (exported, loaded):
        with torch.no_grad():
            torch.testing.assert_close(runner(**sample), model(**sample), rtol=0, atol=1e-6)
        with pytest.raises(InputBoundsError, match=r"holds \[\[1, 4\], \[2, 3\]\], but this export was built for"):
            runner(hidden_states=sample["hidden_states"], grid=torch.tensor([[1, 4], [2, 3]]))
        with pytest.raises(InputError, match="Missing input 'grid'"):
            runner(hidden_states=sample["hidden_states"])


def test_integer_inputs_read_as_data_stay_inputs() -> None:
    model = _UsesLengthsAsData()
    sample = {"hidden_states": torch.randn(3, 4), "lengths": torch.tensor([1, 2, 3])}
    exported = _export(model, sample)
    signature = exported.components["model"].metadata.signature
    assert signature.input_names == ["hidden_states", "lengths"] and not signature.constants
    other = {"hidden_states": torch.randn(5, 4), "lengths": torch.tensor([4, 1, 2, 0, 7])}
    torch.testing.assert_close(exported(**other), model(**other))


def test_values_read_through_symbolic_sizes_fix_the_sample_sizes() -> None:
    model = _MaskedLengths()
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]])
    sample = {"input_features": torch.randn(2, 5, 3), "features_mask": mask}
    with pytest.warns(UserWarning, match="features_mask"):
        exported = _export(model, sample)
    signature = exported.components["model"].metadata.signature
    assert signature.input_names == ["input_features"] and is_fixed(signature.constants["features_mask"])
    assert signature.dims["batch"].pinned  # the batch the mask's values were read at
    torch.testing.assert_close(exported(**sample), model(**sample))
    with pytest.raises(InputBoundsError, match="outside the exported bounds"):
        exported(input_features=torch.randn(3, 5, 3), features_mask=torch.ones(3, 5, dtype=torch.long))


def test_fixed_values_on_onnx() -> None:
    from hub_export import OnnxConfig, OnnxExporter

    model = _SplitByGrid().eval()
    sample = _grid_sample()
    with pytest.warns(UserWarning, match="grid"):
        exported = OnnxExporter().export(model, sample, config=OnnxConfig(dynamic=True))
    with torch.no_grad():
        torch.testing.assert_close(exported(**sample), model(**sample), rtol=1e-4, atol=1e-5)
    with pytest.raises(InputBoundsError, match="this export was built for"):
        exported(hidden_states=sample["hidden_states"], grid=torch.tensor([[1, 4], [2, 3]]))


def test_the_fold_is_reversible() -> None:
    import torch._subclasses.fake_tensor as fake_tensor

    from hub_export.patches.values import fixed_values_fold

    mode = fake_tensor.FakeTensorMode
    limit, build = fake_tensor.CONSTANT_NUMEL_LIMIT, torch.tensor
    dispatch, cached = mode._dispatch_impl, mode._cached_dispatch_impl
    with mode():  # an earlier trace's `arange(6)` sits in FakeTensorMode's class-wide dispatch cache
        assert torch.arange(6).constant is None
    with fixed_values_fold():
        assert fake_tensor.CONSTANT_NUMEL_LIMIT > limit
        assert mode._dispatch_impl is not dispatch and mode._cached_dispatch_impl is not cached
        assert torch.tensor([torch.tensor(3), 4]).tolist() == [3, 4]
        with mode():  # the fold answers before the cache does (a CI failure that depended on test order)
            assert torch.arange(6).constant.tolist() == list(range(6))
    assert fake_tensor.CONSTANT_NUMEL_LIMIT == limit
    assert mode._dispatch_impl is dispatch and mode._cached_dispatch_impl is cached and torch.tensor is build


class _MaskFromShape(torch.nn.Module):
    """Builds a pixel mask from the input's shape and reads sizes from it (ViLT's ``visual_embed``)."""

    def forward(self, pixel_values: torch.Tensor) -> torch.Tensor:
        mask = torch.ones(pixel_values.shape[0], pixel_values.shape[1], dtype=torch.long)
        height = int(mask[0].sum())
        return pixel_values[:, : height - 1] if height > 2 else pixel_values


class _GlobalAttentionBranch(torch.nn.Module):
    """Branches on the attention mask's values (Longformer/LED's ``is_global_attn``)."""

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        hidden = input_ids.float() * attention_mask
        return hidden * 2 if bool((attention_mask > 1).any()) else hidden


def test_sizes_from_a_mask_built_inside_fix_the_sample_sizes() -> None:
    model = _MaskFromShape()
    sample = {"pixel_values": torch.randn(2, 5, 3)}
    exported = _export(model, sample)
    signature = exported.components["model"].metadata.signature
    assert not signature.constants and signature.dims["batch"].pinned
    torch.testing.assert_close(exported(**sample), model(**sample))
    with pytest.raises(InputBoundsError, match="outside the exported bounds"):
        exported(pixel_values=torch.randn(3, 5, 3))


def test_a_branch_on_the_attention_mask_fixes_the_mask() -> None:
    model = _GlobalAttentionBranch()
    sample = {"input_ids": torch.arange(8).reshape(2, 4), "attention_mask": torch.ones(2, 4, dtype=torch.long)}
    with pytest.warns(UserWarning, match="'attention_mask'"):
        exported = _export(model, sample)
    assert is_fixed(exported.components["model"].metadata.signature.constants["attention_mask"])
    torch.testing.assert_close(exported(**sample), model(**sample))
    global_attention = torch.tensor([[2, 1, 1, 1], [1, 1, 1, 1]])
    with pytest.raises(InputBoundsError, match="this export was built for attention_mask"):
        exported(input_ids=sample["input_ids"], attention_mask=global_attention)


def test_a_fixed_input_that_does_not_fill_its_shape_is_refused(tmp_path: Path) -> None:
    from hub_export.errors import ManifestError
    from hub_export.signature import Signature

    exported = _export(_SplitByGrid().eval(), _grid_sample())
    data = exported.components["model"].metadata.signature.to_json()
    data["constants"]["grid"] = {"dtype": "int64", "shape": [2, 2], "values": [2, 3, 1]}
    with pytest.raises(ManifestError, match="3 int64 values for shape"):
        Signature.from_json(data)
    data["constants"]["grid"] = {"dtype": "int8", "shape": [1], "values": [1000]}
    with pytest.raises(ManifestError, match="do not fit int8"):
        Signature.from_json(data)
