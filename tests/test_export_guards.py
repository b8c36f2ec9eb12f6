"""hub_export.export._guards: size guards through ``//``, ``%`` and ``min`` become dim bounds, so another size is
refused up front with one clear error on every backend instead of ``Guard failed: <expression>`` (or a wrong shape
on a backend that keeps no guards)."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
import torch

from hub_export import DynamoConfig, DynamoExporter, ExportedModel
from hub_export.dims import Dim
from hub_export.errors import InputBoundsError


class _Blocks(torch.nn.Module):
    """Folds the sequence into blocks of 4 (a pooling / striding model): the sequence must be a multiple of 4."""

    def __init__(self, block: int = 4) -> None:
        super().__init__()
        self.block = block
        self.proj = torch.nn.Linear(block, 3)

    def forward(self, input_ids: torch.Tensor) -> dict[str, torch.Tensor]:
        batch, length = input_ids.shape
        return {"logits": self.proj(input_ids.float().view(batch, length // self.block, self.block))}


class _Capped(torch.nn.Module):
    """A compressed-attention-like check through ``min`` and ``//`` that holds only below 8 tokens."""

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        length = input_ids.shape[1]
        kept = min(length, 4 * (length // 4))
        torch._check(4 * (4 * kept // max(kept // 4, 1)) >= 16 * kept)
        return input_ids.float() * 2


class _FramedPooled(torch.nn.Module):
    """Frames of 80 samples, pooled by 4 frames after padding the last group (an audio encoder's subsampling): the
    guards read ``s // 80`` and ``(s // 80 - 1) // 4``, of period 320, but every multiple of 80 runs."""

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        batch, length = input_ids.shape
        frames = input_ids.float().view(batch, length // 80, 80).mean(-1)
        pooled = (frames.shape[1] - 1) // 4 + 1
        if pooled == 1:  # a branch on the pooled count: a guard through both divisions
            return frames.sum(-1, keepdim=True)
        return torch.nn.functional.pad(frames, (0, 4 * pooled - frames.shape[1])).view(batch, pooled, 4).sum(-1)


class _Molecules(torch.nn.Module):
    """Characters downsampled by 4 into molecules, attention over the molecules (CANINE): at 7 characters there is
    one molecule, and the view check of ``matmul``'s decomposition guards ``(s // 4) == 1``."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.embed = torch.nn.Embedding(64, 8)
        self.down = torch.nn.Conv1d(8, 8, kernel_size=4, stride=4)
        self.query = torch.nn.Linear(8, 8)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        molecules = self.down(self.embed(input_ids).transpose(1, 2)).transpose(1, 2)
        batch, count = molecules.shape[:2]
        query = self.query(molecules).view(batch, count, 2, 4).transpose(1, 2)
        key = molecules.view(batch, count, 2, 4).permute(0, 2, 3, 1)
        return torch.matmul(torch.matmul(query, key).softmax(-1), query).sum(1)


class _BranchOnOneMolecule(torch.nn.Module):
    """A model that truly computes otherwise for one molecule: the longer trace takes the other branch."""

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        if input_ids.shape[1] // 4 == 1:
            return input_ids.float() * 2
        return input_ids.float() * 3


class _Plain(torch.nn.Module):
    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return input_ids.float().cumsum(-1)


def _export(model: torch.nn.Module, length: int):
    sample = {"input_ids": torch.arange(2 * length).reshape(2, length)}
    return DynamoExporter().export(model, sample, config=DynamoConfig(dynamic=True))


def _ids(batch: int, length: int) -> torch.Tensor:
    return torch.arange(batch * length).reshape(batch, length)


def test_multiple_of_from_a_view_guard(tmp_path: Path) -> None:
    model = _Blocks().eval()
    exported = _export(model, 8)
    dims = exported.components["model"].metadata.signature.dims
    assert dims["sequence"].multiple_of == 4 and dims["sequence"].max is None
    assert dims["batch"] == Dim("batch", dims["batch"].min, None)  # the batch is not narrowed
    exported.save_pretrained(tmp_path)
    loaded = ExportedModel.from_pretrained(tmp_path)  # the multiple survives export.json
    for runner in (exported, loaded):
        with torch.no_grad():
            torch.testing.assert_close(
                runner(input_ids=_ids(3, 20))["logits"], model(_ids(3, 20))["logits"], rtol=0, atol=1e-6
            )
        with pytest.raises(InputBoundsError, match="Pad it to a multiple of 4"):
            runner(input_ids=_ids(3, 11))


def test_a_multiple_longer_than_the_probe_window() -> None:
    """Blocks of 160 (an audio encoder's samples per token): the window around the traced size holds no other
    multiple, so the dim is probed in the guards' own steps rather than pinned to the sample's length."""
    model = _Blocks(160).eval()
    exported = _export(model, 320)
    sequence = exported.components["model"].metadata.signature.dims["sequence"]
    assert sequence.multiple_of == 160 and sequence.min <= 320 and sequence.max is None
    with torch.no_grad():
        torch.testing.assert_close(exported(input_ids=_ids(3, 800))["logits"], model(_ids(3, 800))["logits"])
    with pytest.raises(InputBoundsError, match="multiple of 160"):
        exported(input_ids=_ids(3, 400))


def test_the_finest_step_of_the_guards_is_probed_first() -> None:
    """Traced at 400 samples (not a multiple of the period 320): probed in steps of 80, not pinned to 400."""
    model = _FramedPooled()
    exported = _export(model, 400)
    samples = exported.components["model"].metadata.signature.dims["sequence"]
    assert samples.multiple_of == 80 and samples.min <= 400 and samples.max is None
    torch.testing.assert_close(exported(input_ids=_ids(3, 480)), model(_ids(3, 480)), rtol=0, atol=1e-6)
    with pytest.raises(InputBoundsError, match="multiple of 80"):
        exported(input_ids=_ids(3, 500))


def test_maximum_from_a_min_floordiv_guard() -> None:
    """A cap the model's code puts on the sequence is read from its guards, said at export, and refused at run."""
    model = _Capped()
    with pytest.warns(UserWarning, match=r"_Capped: the model's code bounds 'sequence' to \[0, 7\]"):
        exported = _export(model, 7)
    sequence = exported.components["model"].metadata.signature.dims["sequence"]
    assert sequence.max == 7 and sequence.multiple_of == 1
    torch.testing.assert_close(exported(input_ids=_ids(3, 5)), model(_ids(3, 5)))
    with pytest.raises(InputBoundsError, match=r"size 11 on axis 1 \(sequence\), outside the exported bounds"):
        exported(input_ids=_ids(3, 11))


def test_a_derived_size_of_one_does_not_cap_the_dim(tmp_path: Path) -> None:
    """Traced at 7 characters (one molecule), the guards capped the sequence at 7: the export is traced again from
    a sample tiled past the cap, keeps the first trace's minimum, and is checked at the user's sample too."""
    model = _Molecules().eval()
    ids = torch.randint(0, 64, (2, 7), generator=torch.Generator().manual_seed(0))
    exported = DynamoExporter().export(model, {"input_ids": ids}, config=DynamoConfig(dynamic=True))
    metadata = exported.components["model"].metadata
    assert metadata.signature.dims["sequence"] == Dim("sequence", 4, None)
    assert metadata.parity["max_abs_diff"] <= 1e-5
    exported.save_pretrained(tmp_path)
    loaded = ExportedModel.from_pretrained(tmp_path)  # the dropped "not one molecule" guard stays dropped
    for length in (5, 7, 11, 33):
        other = torch.randint(0, 64, (3, length), generator=torch.Generator().manual_seed(length))
        with torch.no_grad():
            want = model(other)
            for runner in (exported, loaded):
                torch.testing.assert_close(runner(input_ids=other), want, rtol=1e-5, atol=1e-6)
    with pytest.raises(InputBoundsError, match="size 3 on axis 1"):
        exported(input_ids=_ids(2, 3))


def test_a_real_branch_on_a_derived_size_keeps_the_cap() -> None:
    """The trace past the cap computes otherwise at the user's sample: the first trace, capped, is kept."""
    with pytest.warns(UserWarning, match=r"bounds 'sequence' to \[4, 7\]"):
        exported = _export(_BranchOnOneMolecule(), 7)
    sequence = exported.components["model"].metadata.signature.dims["sequence"]
    assert (sequence.min, sequence.max) == (4, 7)
    torch.testing.assert_close(exported(input_ids=_ids(2, 5)), _ids(2, 5).float() * 2)


def test_dims_without_arithmetic_guards_stay_unbounded() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing capped: nothing said
        dims = _export(_Plain(), 7).components["model"].metadata.signature.dims
    assert dims["sequence"].max is None and dims["sequence"].multiple_of == 1


def test_onnx_refuses_the_same_size_up_front() -> None:
    """ONNX keeps no guards: without the bound a size of 11 would fail inside the runtime's Reshape."""
    pytest.importorskip("onnxruntime")
    from hub_export import OnnxConfig, OnnxExporter

    model = _Blocks().eval()
    exported = OnnxExporter().export(model, {"input_ids": _ids(2, 8)}, config=OnnxConfig(dynamic=True))
    assert exported.components["model"].metadata.signature.dims["sequence"].multiple_of == 4
    with torch.no_grad():
        torch.testing.assert_close(
            exported(input_ids=_ids(1, 12))["logits"], model(_ids(1, 12))["logits"], rtol=1e-5, atol=1e-5
        )
    with pytest.raises(InputBoundsError, match="multiple of 4"):
        exported(input_ids=_ids(1, 10))


class _Features(torch.nn.Module):
    """A time-series-like head: values concatenated with time features, of which the sample has none."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(3, 2)

    def forward(self, values: torch.Tensor, features: torch.Tensor) -> torch.Tensor:
        logits = self.proj(torch.cat([values, features], dim=-1))
        entropy = torch.distributions.Categorical(logits=logits).entropy()  # checks its arguments in eager
        return logits.sum(-1) + entropy


def test_an_empty_axis_stays_empty_and_distributions_trace() -> None:
    """An empty axis past the batch was traced symbolic (then `s + 3 == 3` failed the Linear's shape check), and
    ``torch.distributions`` checked their arguments on tensor values (GuardOnDataDependentSymNode)."""
    model = _Features().eval()
    sample = {"values": torch.randn(2, 5, 3), "features": torch.randn(2, 5, 0)}
    validate = torch.distributions.Distribution._validate_args  # False once torch.compile ran in this process
    exported = DynamoExporter().export(model, sample, config=DynamoConfig(dynamic=True))
    spec = {s.name: s for s in exported.components["model"].metadata.signature.inputs}["features"]
    assert spec.shape[-1] == 0
    other = {"values": torch.randn(3, 7, 3), "features": torch.randn(3, 7, 0)}
    with torch.no_grad():
        torch.testing.assert_close(exported(**other), model(**other), rtol=0, atol=1e-6)
    assert torch.distributions.Distribution._validate_args is validate  # restored after tracing
