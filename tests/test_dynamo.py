"""Dynamo (torch.export) backend: the six tiny models export dynamically, save, load and match eager.

Every test here makes single calls: the models have one layer, and each is exported dynamically once for the module
(``exports``) unless a test needs a sample or a config of its own."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from tiny_models import CASES, build

from hub_export import DynamoConfig, DynamoExporter, ExportedModel
from hub_export.dims import Dim
from hub_export.structure import flatten_value


def flat(output) -> list[torch.Tensor]:
    leaves: list = []
    flatten_value(output, (), leaves)
    return [t for _, t in leaves]


def max_diff(a, b) -> float:
    fa, fb = flat(a), flat(b)
    assert len(fa) == len(fb)
    return max(float((x - y).abs().max()) for x, y in zip(fa, fb) if x.numel())


@pytest.fixture(scope="module")
def exports() -> Any:
    """name -> (case, its dynamic export): each tiny model (one layer) is exported once for the module."""
    done: dict[str, tuple[Any, Any]] = {}

    def get(name: str) -> tuple[Any, Any]:
        if name not in done:
            case = build(name, layers=1)
            done[name] = (case, DynamoExporter().export(case.model, case.sample, config=DynamoConfig(dynamic=True)))
        return done[name]

    return get


@pytest.mark.parametrize("name", list(CASES))
def test_dynamic_export_save_load_run(name: str, exports: Any, tmp_path) -> None:
    case, exported = exports(name)
    metadata = exported.components["model"].metadata
    assert metadata.parity["max_abs_diff"] <= 1e-5
    exported.save_pretrained(tmp_path / "pt2")
    loaded = ExportedModel.from_pretrained(tmp_path / "pt2")
    assert isinstance(loaded.program, torch.export.ExportedProgram)
    for inputs in (case.sample, case.other):
        with torch.no_grad():
            expected = case.model(**inputs)
        got = loaded(**inputs)
        assert type(got) is type(expected)
        assert max_diff(got, expected) <= 1e-5
    # the batch axis is symbolic and named
    assert metadata.signature.inputs[0].shape[0] == "batch"


def test_cache_output_is_a_real_dynamic_cache(exports: Any) -> None:
    from transformers import DynamicCache

    case, exported = exports("llama")
    out = exported(**case.other)
    assert isinstance(out.past_key_values, DynamicCache)
    assert out.past_key_values.get_seq_length() == case.other["input_ids"].shape[1]
    names = [s.name for s in exported.components["model"].metadata.signature.outputs]
    assert names[:3] == ["logits", "past_key_values.0.key", "past_key_values.0.value"]


def test_decode_step_with_cache_input_pairs_names() -> None:
    case = build("llama", layers=1)
    prompt = case.sample
    with torch.no_grad():
        first = case.model(**prompt)
    step = {
        "input_ids": torch.tensor([[5]]),
        "attention_mask": torch.ones(1, prompt["input_ids"].shape[1] + 1, dtype=torch.int64),
        "past_key_values": first.past_key_values,
    }
    before = first.past_key_values.get_seq_length()
    exported = DynamoExporter().export(case.model, step, config=DynamoConfig(dynamic=True))
    assert first.past_key_values.get_seq_length() == before  # the caller's cache is not mutated
    metadata = exported.components["model"].metadata
    names = [s.name for s in metadata.signature.inputs]
    assert "input.past_key_values.0.key" in names
    assert "output.past_key_values.0.key" in [s.name for s in metadata.signature.outputs]
    key_spec = next(s for s in metadata.signature.inputs if s.name == "input.past_key_values.0.key")
    assert key_spec.shape[2] == "past_sequence"
    with torch.no_grad():
        expected = case.model(**{**step, "past_key_values": case.model(**prompt).past_key_values})
    got = exported(**{**step, "past_key_values": case.model(**prompt).past_key_values})
    assert max_diff(got, expected) <= 1e-5


def test_all_ones_attention_mask_stays_an_input(exports: Any) -> None:
    case, exported = exports("llama")
    assert bool(case.sample["attention_mask"].all())
    assert [s.name for s in exported.components["model"].metadata.signature.inputs] == ["input_ids", "attention_mask"]
    # and it is honoured: a padded mask changes the logits exactly like eager
    padded = dict(case.other)
    with torch.no_grad():
        expected = case.model(**padded).logits
    assert torch.allclose(exported(**padded).logits, expected, atol=1e-5)


def test_flags_are_trace_constants() -> None:
    case = build("gpt2", layers=1)
    sample = {"input_ids": case.sample["input_ids"], "use_cache": False, "return_dict": True}
    exported = DynamoExporter().export(case.model, sample, config=DynamoConfig(dynamic=True))
    metadata = exported.components["model"].metadata
    assert metadata.signature.constants == {"use_cache": False, "return_dict": True}
    assert [s.name for s in metadata.signature.outputs] == ["logits"]
    out = exported(input_ids=case.other["input_ids"])
    assert out.logits.shape[0] == 3 and out.past_key_values is None


def test_batch_one_sample_stays_dynamic(exports: Any) -> None:
    case, exported = exports("llama")  # a tokenizer("...") sample: batch 1
    assert case.sample["input_ids"].shape[0] == 1
    assert exported.components["model"].metadata.signature.inputs[0].shape[0] == "batch"
    assert exported(**case.other).logits.shape[0] == 3


def test_static_export_and_explicit_dims() -> None:
    case = build("bert", layers=1)
    static = DynamoExporter().export(case.model, case.sample)
    assert static.components["model"].metadata.signature.inputs[0].shape == (2, 8)
    batch = torch.export.Dim("batch", min=1, max=16)
    seq = torch.export.Dim("seq", min=2, max=64)
    config = DynamoConfig(
        dynamic_shapes={name: {0: batch, 1: seq} for name in case.sample},
        prefer_deferred_runtime_asserts_over_guards=True,
    )
    exported = DynamoExporter().export(case.model, case.sample, config=config)
    dims = exported.components["model"].metadata.signature.dims
    assert dims["batch"] == Dim("batch", 1, 16) and dims["sequence"] == Dim("sequence", 2, 64)


def test_in_memory_export_shares_the_weights_and_a_saved_one_is_independent(tmp_path) -> None:
    """Exporting keeps no second copy of the weights: the in-memory program reads the model's own parameters (as
    torch.export's does). What is saved is a snapshot: changing the model afterwards does not change it."""
    case = build("vit", layers=1)  # its own: the test zeroes the weights
    exported = DynamoExporter().export(case.model, case.sample, config=DynamoConfig(dynamic=True))
    before = exported(**case.sample).logits.clone()
    exported.save_pretrained(tmp_path / "vit")
    with torch.no_grad():
        for param in case.model.parameters():
            param.zero_()
    assert not torch.equal(exported(**case.sample).logits, before)
    assert torch.equal(ExportedModel.from_pretrained(tmp_path / "vit")(**case.sample).logits, before)
