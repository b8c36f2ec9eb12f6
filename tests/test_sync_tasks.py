"""Tasks and self-contained exports on the Hub: ``sync --task``, exports carrying their source's tokenizer, an
``export_for_generation`` export pushed from Python kept fresh by ``sync``, and the card (embedded Hub, real client)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import yaml
from huggingface_hub import HfApi, hf_hub_download
from tiny_tokenizers import VOCAB_SIZE, llama_tokenizer

from hub_export import ExportedModel
from hub_export.cli.main import main
from hub_export.embedded_hub.server import HubServer
from hub_export.errors import UnsafeExportError
from hub_export.manifest import Manifest
from hub_export.preprocessing import check_preprocessing_file, read_preprocessing

SOURCE = "me/tiny-llama-tok"
TARGET = "me/tiny-llama-exports"
PROMPT = "the cat sat on a mat"


def _llama(seed: int):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=VOCAB_SIZE,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=64,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
        architectures=["LlamaForCausalLM"],
    )
    return LlamaForCausalLM(config).eval()


def _upload(api: HfApi, folder: Path, seed: int) -> str:
    """A tiny Llama with a real BPE tokenizer, saved and uploaded to SOURCE; returns the commit."""
    _llama(seed).save_pretrained(folder)
    llama_tokenizer().save_pretrained(folder)
    api.create_repo(SOURCE, exist_ok=True)
    (folder / "README.md").write_text("---\nlicense: apache-2.0\n---\n# tiny\n")
    return api.upload_folder(repo_id=SOURCE, folder_path=str(folder), commit_message=f"seed {seed}").oid


def _manifest(repo: str, sub: str) -> Manifest:
    return Manifest.loads(Path(hf_hub_download(repo, f"{sub}/export.json")).read_bytes())


def _greedy(model, inputs) -> torch.Tensor:
    return model.generate(**inputs, max_new_tokens=6, do_sample=False)


def test_sync_task_publishes_self_contained_generation_exports_and_keeps_python_ones_fresh(
    hub_api: HfApi, hub_env: HubServer, tmp_path: Path
):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from hub_export import OnnxConfig, OnnxExporter

    first = _upload(hub_api, tmp_path / "seed-0", 0)
    args = ["sync", SOURCE, "--target", TARGET, "--task", "text-generation", "-f", "dynamo"]
    assert main([*args, "--quiet"]) == 0
    tokenizer = AutoTokenizer.from_pretrained(SOURCE)
    inputs = tokenizer([PROMPT], return_tensors="pt")
    eager = _greedy(_llama(0), inputs)
    for sub in ("pt2",):
        manifest = _manifest(TARGET, sub)
        assert manifest.task == "text-generation" and manifest.generation is not None
        assert manifest.source.repo_id == SOURCE and manifest.source.revision == first
        roles = {f.path: f.role for f in manifest.side_files()}
        assert roles["tokenizer.json"] == roles["tokenizer_config.json"] == "tokenizer"
        loaded = ExportedModel.from_pretrained(TARGET, subfolder=sub)
        assert torch.equal(_greedy(loaded, inputs), eager)
        exported_tokenizer = AutoTokenizer.from_pretrained(TARGET, subfolder=sub)
        for text in (PROMPT, "birds sang in tall oak trees", "zebra"):
            assert exported_tokenizer(text).input_ids == tokenizer(text).input_ids
    card = Path(hf_hub_download(TARGET, "README.md")).read_text()
    meta = yaml.safe_load(card.split("---")[1])
    assert meta["pipeline_tag"] == "text-generation" and meta["license"] == "apache-2.0"
    assert meta["base_model"] == SOURCE and "base_model_relation" not in meta  # same weights, not quantized
    assert 'AutoTokenizer.from_pretrained("me/tiny-llama-exports", subfolder="pt2")' in card
    assert "model.generate(" in card

    # an export_for_generation export made in Python from transformers' own from_pretrained(repo id)
    model = AutoModelForCausalLM.from_pretrained(SOURCE).eval()
    exported = OnnxExporter().export_for_generation(model, dict(inputs), config=OnnxConfig(dynamic=True))
    exported.push_to_hub(TARGET, subfolder="onnx-gen")
    pushed = _manifest(TARGET, "onnx-gen")
    assert pushed.source.revision == first and pushed.task == "text-generation"
    assert "tokenizer.json" in {f.path for f in pushed.side_files("tokenizer")}

    # a new checkpoint: the sync re-exports the requested formats and the Python one, each as it was made
    second = _upload(hub_api, tmp_path / "seed-1", 1)
    assert main(["sync", SOURCE, "--target", TARGET, "-f", "dynamo", "--quiet"]) == 0
    eager = _greedy(_llama(1), inputs)
    for sub in ("pt2", "onnx-gen"):
        manifest = _manifest(TARGET, sub)
        assert manifest.source.revision == second and manifest.generation is not None, sub
        assert manifest.task == "text-generation"
    for sub in ("onnx-gen", "pt2"):
        assert torch.equal(_greedy(ExportedModel.from_pretrained(TARGET, subfolder=sub), inputs), eager)
    assert main(["sync", SOURCE, "--target", TARGET, "-f", "dynamo", "--dry-run", "--quiet"]) == 0


def test_an_unknown_task_is_refused_before_anything_is_downloaded(capsys):
    assert main(["sync", SOURCE, "-f", "onnx", "--task", "summarize-everything"]) == 1
    err = capsys.readouterr().err
    assert "--task summarize-everything is not a task hub-export knows" in err and "text-generation" in err


def test_saving_an_export_of_a_model_folder_copies_its_tokenizer(tmp_path: Path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from hub_export import DynamoExporter

    folder = tmp_path / "model"
    _llama(0).save_pretrained(folder)
    llama_tokenizer().save_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder).eval()
    tokenizer = AutoTokenizer.from_pretrained(folder)
    exported = DynamoExporter().export(model, dict(tokenizer(["the cat", "a dog"], return_tensors="pt")))
    assert exported.task is None  # one graph of a causal LM cannot generate: it claims no text-generation
    target = exported.save_pretrained(tmp_path / "export")
    manifest = Manifest.read(target)
    listed = {f.path: f.role for f in manifest.side_files()}
    assert {name: listed.get(name) for name in read_preprocessing(folder)} == {
        name: "tokenizer" for name in read_preprocessing(folder)
    }
    assert AutoTokenizer.from_pretrained(target)(PROMPT).input_ids == tokenizer(PROMPT).input_ids
    # a loaded export keeps them when saved again
    again = ExportedModel.from_pretrained(target).save_pretrained(tmp_path / "again")
    assert (again / "tokenizer.json").read_bytes() == (folder / "tokenizer.json").read_bytes()


@pytest.mark.parametrize(
    "name,data,message",
    [
        ("tokenizer_config.json", b'{"auto_map": {"AutoTokenizer": ["x.Tok", null]}}', "names remote code"),
        ("tokenizer_config.json", b"[1, 2]", "not an object"),
        ("tokenizer.json", b"{not json", "not valid JSON"),
        ("merges.txt", b"\xff\xfe", "not UTF-8"),
        ("tokenizer.py", b"import os", "not a preprocessing file"),
    ],
)
def test_preprocessing_files_are_checked_as_data(name: str, data: bytes, message: str):
    with pytest.raises(UnsafeExportError, match=message):
        check_preprocessing_file(name, data)


def test_a_symlinked_tokenizer_is_not_read(tmp_path: Path):
    outside = tmp_path / "secret.json"
    outside.write_text("{}")
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "tokenizer.json").symlink_to(outside)
    with pytest.raises(UnsafeExportError, match="symlink"):
        read_preprocessing(folder)


def test_export_task_makes_a_generation_export_with_the_tokenizer_and_the_card_says_so(tmp_path: Path):
    import dataclasses
    import json

    from transformers import AutoTokenizer

    from hub_export._files import file_entry
    from hub_export.hub.card import CardExport, render_card
    from hub_export.manifest import Source

    folder, out = tmp_path / "model", tmp_path / "out"
    _llama(0).save_pretrained(folder)
    llama_tokenizer().save_pretrained(folder)
    assert main(["export", str(folder), "--task", "text-generation", "-f", "dynamo", "-o", str(out), "--quiet"]) == 0
    loaded = ExportedModel.from_pretrained(out)
    assert loaded.task == "text-generation" and loaded.generation is not None
    tokenizer = AutoTokenizer.from_pretrained(out)
    inputs = tokenizer([PROMPT], return_tensors="pt")
    assert torch.equal(_greedy(loaded, inputs), _greedy(_llama(0), inputs))

    # the card of a quantized export of it: task, license, relation and a tokenizer + generate() snippet
    manifest = Manifest.read(out)
    manifest = dataclasses.replace(
        manifest, source=Source("me/src", "a" * 40), config={**manifest.config, "quantizer": {"quantizer": "Q"}}
    )
    card = render_card(
        "---\nlibrary_name: hub-export\n---\n# exports\n",
        {"pt2": CardExport("pt2", manifest)},
        "me/exports",
        default_library="hub-export",
        source_meta={"license": "other", "license_name": "tiny-license"},
    )
    meta = yaml.safe_load(card.split("---")[1])
    assert meta["pipeline_tag"] == "text-generation" and meta["base_model"] == "me/src"
    assert meta["base_model_relation"] == "quantized" and meta["license"] == "other"
    assert meta["license_name"] == "tiny-license" and meta["library_name"] == "hub-export"
    assert 'tokenizer = AutoTokenizer.from_pretrained("me/exports", subfolder="pt2")' in card
    assert "ids = model.generate(**inputs, max_new_tokens=32)" in card
    edited = card.replace("pipeline_tag: text-generation", "pipeline_tag: other")
    kept = render_card(edited, {"pt2": CardExport("pt2", manifest)}, "me/exports", default_library="x")
    assert "pipeline_tag: other" in kept  # a value already in the card is never changed

    # a tokenizer file that names remote code makes the export refused, even with a matching manifest entry
    config = out / "tokenizer_config.json"
    config.write_text(json.dumps({**json.loads(config.read_text()), "auto_map": {"AutoTokenizer": ["x.Tok", None]}}))
    listed = Manifest.read(out)
    files = [file_entry(out, e.path, e.role) if e.path == config.name else e for e in listed.all_listed()]
    listed.with_files(files).write(out)
    with pytest.raises(UnsafeExportError, match="names remote code"):
        ExportedModel.from_pretrained(out)


def test_sync_makes_data_free_quantization_recipes_again_and_not_calibrated_ones():
    import torch

    from hub_export import (
        NNCFQuantizer,
        NNCFWeightCompressionConfig,
        OnnxRuntimeDynamicConfig,
        OnnxRuntimeQuantizer,
        OnnxRuntimeStaticConfig,
        OnnxRuntimeWeightOnlyConfig,
    )
    from hub_export.hub.wanted import rebuild_quantizer

    for quantizer in (
        OnnxRuntimeQuantizer(config=OnnxRuntimeWeightOnlyConfig(bits=8, block_size=64)),
        OnnxRuntimeQuantizer(config=OnnxRuntimeDynamicConfig(per_channel=True)),
        NNCFQuantizer(config=NNCFWeightCompressionConfig(mode="int4_sym", group_size=16)),
    ):
        again = rebuild_quantizer(quantizer.to_dict())
        assert type(again) is type(quantizer) and again.to_dict() == quantizer.to_dict()
    static = OnnxRuntimeQuantizer(OnnxRuntimeStaticConfig(), [{"input_ids": torch.ones(1, 4, dtype=torch.long)}])
    assert rebuild_quantizer(static.to_dict()) is None
    assert rebuild_quantizer({"quantizer": "SomethingElse", "settings": {}}) is None


def test_an_export_of_an_image_model_folder_carries_its_image_processor(tmp_path: Path):
    import json

    import numpy as np
    from tiny_models import vit
    from transformers import AutoModelForImageClassification

    from hub_export import DynamoExporter

    folder = tmp_path / "vit"
    case = vit()
    case.model.save_pretrained(folder)
    processor = {
        "image_processor_type": "ViTImageProcessor",
        "size": {"height": 32, "width": 32},
        "image_mean": [0.4, 0.5, 0.6],
        "image_std": [0.5, 0.5, 0.5],
    }
    (folder / "preprocessor_config.json").write_text(json.dumps(processor))
    model = AutoModelForImageClassification.from_pretrained(folder).eval()
    exported = DynamoExporter().export(model, case.sample)
    target = exported.save_pretrained(tmp_path / "export")
    assert exported.task == "image-classification"
    listed = {f.path: f.role for f in Manifest.read(target).side_files()}
    assert listed == {"config.json": "config", "preprocessor_config.json": "processor"}
    assert (target / "preprocessor_config.json").read_bytes() == (folder / "preprocessor_config.json").read_bytes()
    pytest.importorskip("PIL", reason="transformers' image processors need Pillow (the test extra installs it)")
    from transformers import AutoImageProcessor

    image = np.random.default_rng(0).integers(0, 255, (40, 48, 3), dtype=np.uint8)
    source, copied = AutoImageProcessor.from_pretrained(folder), AutoImageProcessor.from_pretrained(target)
    assert torch.equal(copied(image, return_tensors="pt").pixel_values, source(image, return_tensors="pt").pixel_values)


def test_sync_plans_every_export_of_the_source_and_keeps_what_it_cannot_make_again(
    hub_api: HfApi, hub_env: HubServer, tmp_path: Path
):
    import dataclasses

    from test_sync import REPO, _tiny_llama, upload_source

    from hub_export import DynamoConfig, DynamoExporter
    from hub_export.hub.sync import plan_sync
    from hub_export.manifest import Source

    sha = upload_source(hub_api, tmp_path / "model")
    inputs = {"input_ids": torch.ones(2, 4, dtype=torch.long)}
    exported = DynamoExporter().export(_tiny_llama(0), inputs, config=DynamoConfig(dynamic=True))
    exported.source = Source(REPO, sha)
    folder = exported.save_pretrained(tmp_path / "export")
    manifest = Manifest.read(folder)
    calibrated = {"quantizer": "OnnxRuntimeQuantizer", "settings": {"mode": "static"}, "calibration_samples": 8}
    dataclasses.replace(manifest, config={**manifest.config, "quantizer": calibrated}).write(folder)
    other = dataclasses.replace(manifest, source=Source("someone/else", sha))
    hub_api.create_repo("me/exports")
    for sub, data in (("pt2-static-int8", None), ("pt2-copy", None), ("pt2-other", other)):
        if data is not None:
            data.write(folder)
        hub_api.upload_folder(repo_id="me/exports", folder_path=str(folder), path_in_repo=sub, repo_type="model")
        if sub == "pt2-static-int8":
            manifest.write(folder)  # the next ones record no quantizer
    plan = plan_sync(REPO, ["onnx"], target="me/exports", task="text-generation")
    by_sub = {f.subfolder: f for f in plan.formats}
    assert set(by_sub) == {"onnx", "pt2-static-int8", "pt2-copy"}  # not pt2-other: made from another model
    assert by_sub["onnx"].status == "missing" and by_sub["onnx"].generation and by_sub["onnx"].task == "text-generation"
    assert by_sub["pt2-copy"].status == "up to date" and not by_sub["pt2-copy"].generation
    kept = by_sub["pt2-static-int8"]
    assert kept.status == "kept" and not kept.stale and "calibration data" in kept.reason
