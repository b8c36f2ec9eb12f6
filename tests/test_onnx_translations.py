"""Operators torchlib has no ONNX function for, translated by ``backends/onnx/patches.translation_table``.

Each test exports a tiny model that records the operator the way transformers models do, runs the ONNX export on
inputs where the answer differs, and compares with eager.
"""

from __future__ import annotations

import pytest
import torch

from hub_export import OnnxConfig, OnnxExporter


class Checks(torch.nn.Module):
    """``torch._check_tensor_all`` (as transformers' ``torch_compilable_check`` does while tracing) and both
    reductions as outputs."""

    def forward(self, input_ids: torch.Tensor) -> dict[str, torch.Tensor]:
        torch._check_tensor_all(input_ids >= 0)
        large = input_ids > 2
        return {"all": torch.ops.aten._is_all_true(large), "any": torch.ops.aten._is_any_true(large)}


@pytest.fixture(scope="module")
def checks() -> object:
    sample = {"input_ids": torch.tensor([[1, 3, 2, 3], [3, 1, 1, 1]])}
    return OnnxExporter().export(Checks().eval(), sample, config=OnnxConfig(dynamic=True))


@pytest.mark.parametrize("ids", [[[3, 4], [5, 6]], [[1, 1, 0]], [[1, 7, 1]]])
def test_is_all_true_and_is_any_true_match_eager(checks: object, ids: list[list[int]]) -> None:
    inputs = {"input_ids": torch.tensor(ids)}
    got, expected = checks(**inputs), Checks()(**inputs)  # type: ignore[operator]
    assert {k: bool(v) for k, v in got.items()} == {k: bool(v) for k, v in expected.items()}


class Squeezes(torch.nn.Module):
    """``squeeze`` of axes that are not 1 (a no-op in ATen, as an RNN-T joint's ``logits.squeeze(2)`` over a
    decoder length above 1), of axes that are, and of a mix; a view to a size-0 axis past the input's rank (a
    zero-width rotary part's ``k_rot.view(batch, 1, seq, 0)``: ONNX reads a 0 as "copy" unless ``allowzero``); an
    ``erfinv``, which ONNX lacks; an integer power past int64 (wraps in ATen); an RMSNorm-style ``rsqrt`` whose 1e-8
    epsilon onnxscript's optimizer took for ``+ 0`` (a zero input gave inf); a number minus an integer tensor."""

    def forward(self, input_ids: torch.Tensor) -> dict[str, torch.Tensor]:
        grid = input_ids[:, :, None, None].float() * torch.ones(1, 1, 3, 1)  # [batch, sequence, 3, 1]
        batch, length = input_ids.shape
        return {
            "not_one": grid.squeeze(2),
            "one": grid.squeeze(-1),
            "mixed": grid.squeeze((1, 2, 3)),
            "first": input_ids[:, :1].squeeze(1),
            "empty": grid[:, :, :, :0].view(batch, length, 3 * 0).view(batch, 1, length, 0),
            # ONNX has no erfinv (Gemma-3n's Normal(0, 1).icdf): both branches of the approximation, and +-1
            "erfinv": torch.erfinv(
                torch.cat([torch.tanh(input_ids.float() - 4.0).flatten(), torch.tensor([1.0, -1.0])])
            ),
            # BLT's n-gram hash: an int64 power past the int64 range wraps in ATen (ONNX Runtime's Pow saturates)
            "power": torch.tensor(5915587277) ** torch.arange(length),
            # Muse-Glimmer's RMSNorm on a left-padded row of zeros: eps 1e-8 keeps it finite
            "epsilon": torch.rsqrt(input_ids.float()[..., None].pow(2).mean(-1) + 1e-8),
            # ProphetNet's 1.0 - attention_mask: torch's type promotion found no aten.sub overload for it
            "one_minus": 1.0 - input_ids,
        }


def test_squeeze_of_an_axis_that_is_not_one_does_nothing() -> None:
    sample = {"input_ids": torch.tensor([[1, 3, 2, 3], [3, 1, 1, 1]])}
    exported = OnnxExporter().export(Squeezes().eval(), sample, config=OnnxConfig(dynamic=True))
    inputs = {"input_ids": torch.arange(9).reshape(3, 3)}
    got, expected = exported(**inputs), Squeezes()(**inputs)
    assert got["empty"].shape == (3, 1, 3, 0)
    for name, value in expected.items():
        torch.testing.assert_close(got[name], value, check_dtype=False, rtol=1e-5, atol=1e-4)


class TwoClamps(torch.nn.Module):
    """Two clamps of one tensor with other bounds, written as min/max (onnxscript fuses each into a ``Clip`` whose
    bounds it names after the tensor: the second used to replace the first's)."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.embed = torch.nn.Embedding(16, 8)

    def forward(self, input_ids: torch.Tensor) -> dict[str, torch.Tensor]:
        hidden = self.embed(input_ids) * 3.0
        narrow = torch.minimum(torch.maximum(hidden, torch.tensor(-0.5)), torch.tensor(0.5))
        wide = torch.maximum(torch.minimum(hidden, torch.tensor(2.0)), torch.tensor(-2.0))
        return {"logits": narrow * 10.0 + wide}


def test_two_clip_fusions_of_one_tensor_keep_their_bounds() -> None:
    model = TwoClamps().eval()
    sample = {"input_ids": torch.tensor([[1, 3, 2, 3], [3, 1, 1, 1]])}
    exported = OnnxExporter().export(model, sample, config=OnnxConfig(dynamic=True))
    program = exported.components["model"].program
    assert sum(node.op_type == "Clip" for node in program.graph) == 2  # the fusion this guards happened
    inputs = {"input_ids": torch.arange(15).reshape(3, 5)}
    torch.testing.assert_close(exported(**inputs)["logits"], model(**inputs)["logits"])


class ComplexRotary(torch.nn.Module):
    """Rotary embedding in complex numbers, as DeepSeek-V2 writes it: ``freqs_cis.unsqueeze(...)`` of a complex
    tensor (torchlib has no complex ``unsqueeze``), then ``view_as_complex`` / ``view_as_real`` around a product."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.embed = torch.nn.Embedding(16, 16)
        angles = torch.outer(torch.arange(32).float(), 1.0 / (100.0 ** (torch.arange(4).float() / 4)))
        self.register_buffer("freqs_cis", torch.polar(torch.ones_like(angles), angles), persistent=False)

    def forward(self, input_ids: torch.Tensor) -> dict[str, torch.Tensor]:
        batch, length = input_ids.shape
        hidden = self.embed(input_ids).reshape(batch, length, 2, 4, 2)  # two heads of four complex numbers
        cis = self.freqs_cis[:length].unsqueeze(0).unsqueeze(-2)  # [1, length, 1, 4]
        rotated = torch.view_as_real(torch.view_as_complex(hidden) * cis)
        return {"logits": rotated.flatten(2)}


def test_complex_rotary_embeddings_export() -> None:
    model = ComplexRotary().eval()
    sample = {"input_ids": torch.tensor([[1, 3, 2, 3], [3, 1, 1, 1]])}
    exported = OnnxExporter().export(model, sample, config=OnnxConfig(dynamic=True))
    inputs = {"input_ids": torch.arange(15).reshape(3, 5)}
    torch.testing.assert_close(exported(**inputs)["logits"], model(**inputs)["logits"], rtol=1e-5, atol=1e-5)


class MaskedWrites(torch.nn.Module):
    """``x[:, mask] = v`` (Qwen3-VL's rope index writes positions of the kept tokens of a row): ``aten.index_put``
    with a leading ``None`` before a boolean mask, with full values and with values broadcast over the slices."""

    def forward(self, x: torch.Tensor, mask: torch.Tensor, values: torch.Tensor) -> dict[str, torch.Tensor]:
        full, broadcast = x.clone(), x.clone()
        full[:, mask] = values
        broadcast[:, mask] = values[0, 0]
        return {"full": full, "broadcast": broadcast}


def test_boolean_index_put_after_a_full_slice() -> None:
    mask = torch.tensor([True, False, True, True, False])
    sample = {"x": torch.randn(3, 5, 4), "mask": mask, "values": torch.randn(3, 3, 4)}
    exported = OnnxExporter().export(MaskedWrites().eval(), sample, config=OnnxConfig(dynamic=False))
    got, expected = exported(**sample), MaskedWrites()(**sample)
    for name in expected:
        torch.testing.assert_close(got[name], expected[name], rtol=0, atol=0)


class Streams(torch.nn.Module):
    """ProphetNet's n-gram streams: ``chunk`` of a dynamic length, a ``SplitToSequence`` whose split size the
    graph computes (onnxscript's constant folding read its unknown value: ``backends/onnx/patches.known_split_folding``).
    The split comes from ``run_decompositions``'s re-trace, which the in-place ``mul_`` requires (a program lowered
    as it stands keeps ``chunk``, a plain ``Split``)."""

    def forward(self, hidden: torch.Tensor) -> dict[str, torch.Tensor]:
        main, first, second = hidden.chunk(3, dim=1)
        return {"logits": torch.cat([second, main.clone().mul_(2), first], dim=1)}


def test_a_split_of_a_computed_size_exports() -> None:
    model = Streams().eval()
    exported = OnnxExporter().export(model, {"hidden": torch.randn(2, 6, 4)}, config=OnnxConfig(dynamic=True))
    graph = exported.components["model"].program.graph
    assert any(node.op_type == "SplitToSequence" for node in graph)  # the node the folding could not count
    hidden = torch.randn(3, 9, 4)
    torch.testing.assert_close(exported(hidden=hidden)["logits"], model(hidden)["logits"])
