"""ExportedModel: atomic saves, input validation, errors, and the public API."""

from __future__ import annotations

import dataclasses
import inspect
import warnings
from pathlib import Path

import pytest
import torch
from tiny_models import build

import hub_export
from hub_export import (
    ConfigError,
    DynamoConfig,
    DynamoExporter,
    ExportedModel,
    ExportError,
    HubExportError,
    InputError,
    formats,
)
from hub_export.formats import backend_for


@pytest.fixture(scope="module")
def llama_export():
    case = build("llama", layers=1)  # single calls only
    return case, DynamoExporter().export(case.model, case.sample, config=DynamoConfig(dynamic=True))


def test_atomic_save_keeps_previous_export_on_failure(llama_export, tmp_path: Path, monkeypatch) -> None:
    case, exported = llama_export
    target = tmp_path / "export"
    exported.save_pretrained(target)
    before = {p.name: p.read_bytes() for p in target.iterdir()}

    def boom(programs, directory, *component):  # save_program(program, directory, component) or save_programs
        (Path(directory) / "model.pt2").write_bytes(b"half written")
        raise OSError("disk full")

    backend = backend_for("dynamo")
    failing = dataclasses.replace(backend, save_program=boom, save_programs=boom)
    monkeypatch.setitem(formats._BACKENDS, "dynamo", failing)
    fresh = DynamoExporter().export(case.model, case.sample, config=DynamoConfig(dynamic=True))
    with pytest.raises(OSError, match="disk full"):
        fresh.save_pretrained(target)
    assert {p.name: p.read_bytes() for p in target.iterdir()} == before
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".export")]  # no staging leftovers
    monkeypatch.undo()
    loaded = ExportedModel.from_pretrained(target)
    assert torch.allclose(loaded(**case.sample).logits, case.model(**case.sample).logits, atol=1e-5)


def test_save_refuses_a_folder_that_is_not_an_export(llama_export, tmp_path: Path) -> None:
    _, exported = llama_export
    (tmp_path / "weights.safetensors").write_bytes(b"user data")
    with pytest.raises(
        HubExportError, match="is a folder holding other files than an export; save into an empty or new folder"
    ):
        exported.save_pretrained(tmp_path)
    assert (tmp_path / "weights.safetensors").read_bytes() == b"user data"


def test_resave_of_a_loaded_export_is_byte_identical(llama_export, tmp_path: Path) -> None:
    _, exported = llama_export
    exported.save_pretrained(tmp_path / "a")
    ExportedModel.from_pretrained(tmp_path / "a").save_pretrained(tmp_path / "b")
    for name in ("model.pt2", "config.json"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()


def test_input_errors_name_the_input(llama_export) -> None:
    case, exported = llama_export
    with pytest.raises(InputError, match="Missing input 'input_ids'.*input_ids: int64"):
        exported(attention_mask=case.sample["attention_mask"])
    # what eager fills in itself is filled in the same way: attention_mask all ones
    ones = {"input_ids": case.sample["input_ids"], "attention_mask": torch.ones_like(case.sample["attention_mask"])}
    torch.testing.assert_close(exported(input_ids=case.sample["input_ids"]).logits, exported(**ones).logits)
    with pytest.raises(InputError, match="'input_ids' has dtype float32, expected int64"):
        exported(input_ids=case.sample["input_ids"].float(), attention_mask=case.sample["attention_mask"])
    with pytest.raises(InputError, match="'attention_mask' has rank 1"):
        exported(input_ids=case.sample["input_ids"], attention_mask=case.sample["attention_mask"][0])


def test_untraced_inputs_warn_once(llama_export) -> None:
    case, exported = llama_export
    extra = {**case.sample, "token_type_ids": torch.zeros_like(case.sample["input_ids"])}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        exported(**extra)
        exported(**extra)
    messages = [str(w.message) for w in caught if "did not trace" in str(w.message)]
    assert len(messages) == 1 and "token_type_ids" in messages[0]


def test_training_inputs_are_refused() -> None:
    case = build("gpt2")
    with pytest.raises(ExportError, match=r"Training-only input\(s\) \['labels'\]"):
        DynamoExporter().export(case.model, {**case.sample, "labels": case.sample["input_ids"]})


def test_multi_component_errors(llama_export) -> None:
    _, exported = llama_export
    two = ExportedModel(
        exported.export_format,
        exported.export_config,
        {"a": exported.components["model"], "b": exported.components["model"]},
    )
    with pytest.raises(HubExportError, match=r"components \['a', 'b'\]"):
        two.program
    with pytest.raises(HubExportError, match="export_for_generation"):
        exported.generate(max_new_tokens=2)


def test_to_rebuilds_runners(llama_export) -> None:
    _, exported = llama_export
    first = exported.runners["model"]
    assert exported.to("cpu").runners["model"] is not first
    assert exported.device == torch.device("cpu")


def test_version_drift_warns_once(monkeypatch) -> None:
    from hub_export import _versions

    monkeypatch.setattr(_versions, "_warned", set())
    monkeypatch.setitem(_versions.TESTED_VERSIONS, "torch", "0.0.1")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        DynamoExporter()
        DynamoExporter()
    drift = [str(w.message) for w in caught if "tested with torch==0.0.1" in str(w.message)]
    assert len(drift) == 1 and torch.__version__.split("+")[0] in drift[0]


def test_tested_versions_match_constraints() -> None:
    from hub_export._versions import TESTED_VERSIONS

    pins = {}
    for line in (Path(__file__).resolve().parents[1] / "constraints.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if "==" in line:
            name, version = line.split("==")
            pins[name.strip().lower().replace("_", "-")] = version.strip()
    for name, version in TESTED_VERSIONS.items():
        assert pins[name.lower().replace("_", "-")] == version, name


def test_public_api_is_exported_and_documented() -> None:
    assert len(hub_export.__all__) == len(set(hub_export.__all__))
    for name in hub_export.__all__:
        value = getattr(hub_export, name)
        if name == "__version__":
            continue
        assert inspect.getdoc(value), f"{name} has no docstring"
    import re

    sources = "".join(p.read_text() for p in Path(hub_export.__file__).parent.rglob("*.py"))
    assert not re.search(r"^\s*(from|import) transformers\.exporters", sources, re.M)  # the peer is never imported


# -- what transformers asks of a model ------------------------------------------------------------------------
def test_config_is_the_models_and_the_export_config_has_its_own_name(llama_export, tmp_path: Path) -> None:
    case, exported = llama_export
    assert exported.config is case.model.config and exported.model_config is exported.config
    assert isinstance(exported.export_config, DynamoConfig) and exported.export_config.dynamic is True
    loaded = ExportedModel.from_pretrained(exported.save_pretrained(tmp_path / "export"))
    saved, source = loaded.config.to_dict(), case.model.config.to_dict()
    assert {k: v for k, v in saved.items() if k != "_name_or_path"} == {
        k: v for k, v in source.items() if k != "_name_or_path"
    }
    assert loaded.export_config == exported.export_config


def test_model_attributes_transformers_reads(llama_export) -> None:
    _, exported = llama_export
    assert exported.device == torch.device("cpu") and exported.dtype == torch.float32
    assert exported.main_input_name == "input_ids" and exported.input_modalities == ("text",)
    assert exported.can_generate() is False and exported.base_model_prefix == ""
    assert exported.generation_config.eos_token_id == 2


def test_main_input_is_positional(llama_export) -> None:
    case, exported = llama_export
    ids, mask = case.sample["input_ids"], case.sample["attention_mask"]
    expected = exported(input_ids=ids, attention_mask=mask).logits
    assert torch.equal(exported(ids, attention_mask=mask).logits, expected)
    assert torch.equal(exported.forward(ids, attention_mask=mask).logits, expected)
    with pytest.raises(TypeError, match="positionally"):
        exported(ids, mask)
    with pytest.raises(TypeError, match="multiple values for 'input_ids'"):
        exported(ids, input_ids=ids, attention_mask=mask)


def test_unknown_from_pretrained_arguments_raise_type_error(llama_export, tmp_path: Path) -> None:
    _, exported = llama_export
    folder = exported.save_pretrained(tmp_path / "export")
    with pytest.raises(TypeError, match=r"unexpected keyword argument\(s\) \['trust_remote_code'\]"):
        ExportedModel.from_pretrained(folder, trust_remote_code=True)
    with pytest.raises(ConfigError, match=r"DynamoRunner does not take the option\(s\) \['providers'\]"):
        ExportedModel.from_pretrained(folder, providers=["CPUExecutionProvider"])  # ONNX Runtime's, at load time


def test_token_type_ids_the_config_implies_are_traced() -> None:
    """BERT (type_vocab_size=2) exported from a sample without token_type_ids still takes its tokenizer's, and the
    logits of a sentence pair equal eager's; a call without them runs on zeros, as the model does."""
    from tiny_tokenizers import bert_tokenizer

    from hub_export import OnnxConfig, OnnxExporter

    case, tokenizer = build("bert", layers=1), bert_tokenizer()
    sample = {k: v for k, v in case.sample.items() if k != "token_type_ids"}
    exported = OnnxExporter().export(case.model, sample, config=OnnxConfig(dynamic=True))
    assert "token_type_ids" in dict(exported.components["model"].metadata.signature.input_structure)
    pair = tokenizer(["the cat sat", "a dog"], ["on the mat", "ran to the big park"], padding=True, return_tensors="pt")
    assert int(pair["token_type_ids"].sum()) > 0
    with torch.no_grad():
        expected = case.model(**pair).logits
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing the tokenizer produced is dropped
        produced = exported(**pair).logits
    assert float((produced - expected).abs().max()) <= 1e-6
    single = {k: v for k, v in pair.items() if k != "token_type_ids"}
    with torch.no_grad():
        assert float((exported(**single).logits - case.model(**single).logits).abs().max()) <= 1e-6
