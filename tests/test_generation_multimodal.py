"""Vision- and audio-language models (tiny LLaVA, AudioFlamingo3): decomposed into encoder, projector, embeddings,
language model, head and decode graphs, exported on each backend, and chained by generate() to the same tokens as
eager generate. The text models have one layer: the chain of components is what these tests check (the caches of
several layers are the generation tests')."""

from __future__ import annotations

import copy
import json

import pytest
import torch
from tiny_models import LLAVA_IMAGE_TOKEN, audio_flamingo, audio_flamingo_inputs, llava_inputs
from tiny_models import llava as tiny_llava

from hub_export import (
    DynamoConfig,
    DynamoExporter,
    ExportedModel,
    OnnxConfig,
    OnnxExporter,
    OpenVINOConfig,
    OpenVINOExporter,
)
from hub_export.errors import HubExportError, InputError
from hub_export.utils import decompose_for_generation

_COMPONENTS = ["image_encoder", "multi_modal_projector", "embed_tokens", "language_model", "lm_head", "decode"]
_BACKENDS = {
    "dynamo": (DynamoExporter, DynamoConfig),
    "onnx": (OnnxExporter, OnnxConfig),
    "openvino": (OpenVINOExporter, OpenVINOConfig),  # stateful decode (the default), seeded by the language model
}


@pytest.fixture(scope="module")
def llava():
    return tiny_llava(text_layers=1)


@pytest.fixture(scope="module")
def exports(llava, tmp_path_factory) -> dict:
    cache: dict = {}

    def get(backend: str):
        if backend not in cache:
            exporter, config = _BACKENDS[backend]
            exported = exporter().export_for_generation(llava.model, llava.sample, config=config(dynamic=True))
            folder = exported.save_pretrained(tmp_path_factory.mktemp(f"llava-{backend}") / "export")
            cache[backend] = (exported, ExportedModel.from_pretrained(folder), folder)
        return cache[backend]

    return get


@pytest.fixture(scope="module")
def eager_runs(llava) -> list:
    """(prompt, eager generate's tokens): computed once, compared with every backend's export."""
    runs = [
        llava.sample,
        llava.other,  # batch 2, left padding, other text length
        llava_inputs(1, 3, seed=4),
        llava_inputs(2, 4, seed=5, image=False),  # a text-only prompt: embeddings and language model only
    ]
    return [(inputs, llava.model.generate(**inputs, max_new_tokens=8, do_sample=False)) for inputs in runs]


def test_decompose_finds_the_multimodal_components(llava):
    model, inputs = llava.model, llava.sample
    before = {k: v.clone() for k, v in inputs.items()}
    state = {k: v.clone() for k, v in model.state_dict().items()}
    components = decompose_for_generation(model, inputs)
    assert list(components) == _COMPONENTS
    assert all(torch.equal(inputs[k], v) for k, v in before.items())
    assert all(torch.equal(model.state_dict()[k], v) for k, v in state.items())
    assert "forward" not in vars(model) and "get_image_features" not in vars(model.model)
    assert "forward" not in vars(model.model.multi_modal_projector)
    encoder, kwargs = components["image_encoder"]
    assert set(kwargs) == {"pixel_values"}
    with torch.no_grad():
        # the encoder graph ends where the projector starts: hidden layer -2 without the CLS token
        features = encoder(**kwargs)["image_features"]
        hidden = model.model.vision_tower(inputs["pixel_values"], output_hidden_states=True).hidden_states[-2]
        assert torch.equal(features, hidden[:, 1:])
        projector, projector_kwargs = components["multi_modal_projector"]
        assert torch.equal(projector_kwargs["image_features"], features)
        language, language_kwargs = components["language_model"]
        assert language is model.get_decoder() and language_kwargs["inputs_embeds"].shape == (1, 23, 32)
        assert "attention_mask" in language_kwargs  # restored although generate() dropped the all-ones mask
        decode = components["decode"][1]
        assert decode["input_ids"].shape == (1, 1) and decode["past_key_values"].get_seq_length() == 23
        for module, captured in components.values():
            module(**copy.deepcopy(captured))  # every captured call runs as is


@pytest.mark.parametrize("backend", list(_BACKENDS))
def test_generate_equals_eager_generate(eager_runs, exports, backend):
    exported, loaded, _ = exports(backend)
    assert list(loaded.components) == _COMPONENTS
    for component in exported.components.values():
        assert component.metadata.parity["max_abs_diff"] < 1e-5
    for inputs, expected in eager_runs:
        produced = loaded.generate(**inputs, max_new_tokens=8)
        assert torch.equal(produced, expected), (backend, inputs["input_ids"].shape, produced, expected)


def test_plan_chains_the_components_as_data(exports):
    exported, loaded, folder = exports("dynamo")
    plan = json.loads((folder / "export.json").read_text())["generation"]
    assert plan == exported.generation == loaded.generation
    assert plan["kind"] == "multimodal" and plan["runnable"] is True
    assert plan["modalities"] == [
        {
            "modality": "image",
            "encoder": "image_encoder",
            "inputs": ["pixel_values"],
            "features": "image_features",
            "projector": "multi_modal_projector",
            "projector_input": "image_features",
            "embeds": "image_embeds",
            "token_id": LLAVA_IMAGE_TOKEN,
        }
    ]
    shapes = {name: {s.name: s.shape for s in c.metadata.signature.inputs} for name, c in loaded.components.items()}
    assert shapes["image_encoder"] == {"pixel_values": ("batch", 3, 16, 16)}
    assert shapes["language_model"]["inputs_embeds"] == ("batch", "sequence", 32)
    assert shapes["embed_tokens"] == {"input_ids": ("batch", "sequence")}
    assert loaded.components["image_encoder"].metadata.architecture == "CLIPVisionModel"


def test_placeholders_must_match_the_features(llava, exports):
    _, loaded, _ = exports("dynamo")
    inputs = llava_inputs(1, 3, seed=7)
    inputs["input_ids"][0, 5] = 7  # one placeholder fewer than the image has features
    with pytest.raises(InputError, match="15 image placeholder tokens .* 16 feature vectors"):
        loaded.generate(**inputs, max_new_tokens=2)


def test_a_chain_generate_cannot_follow_is_refused_with_its_reason(exports, tmp_path):
    _, _, folder = exports("dynamo")
    manifest = json.loads((folder / "export.json").read_text())
    manifest["generation"]["runnable"] = "the language model takes positions other than cumsum(attention_mask) - 1"
    exported = ExportedModel.from_pretrained(folder)
    exported.generation = manifest["generation"]
    with pytest.raises(HubExportError, match="cannot chain .* positions other than"):
        exported.generate(**llava_inputs(1, 3), max_new_tokens=2)
    assert exported.runners["lm_head"](hidden_states=torch.zeros(1, 1, 32))["logits"].shape == (1, 1, 96)


@pytest.mark.parametrize("backend", ["dynamo"])  # ONNX and OpenVINO: checked by script (token-identical)
def test_audio_language_model_generate_equals_eager(backend, tmp_path):
    case = audio_flamingo(text_layers=1)
    exporter, config = _BACKENDS[backend]
    exported = exporter().export_for_generation(case.model, case.sample, config=config(dynamic=True))
    assert list(exported.components) == [
        "audio_encoder",
        "multi_modal_projector",
        "embed_tokens",
        "language_model",
        "lm_head",
        "decode",
    ]
    plan = exported.generation
    assert plan["runnable"] is True and plan["modalities"][0]["inputs"] == ["input_features", "input_features_mask"]
    loaded = ExportedModel.from_pretrained(exported.save_pretrained(tmp_path / "export"))
    for inputs in [case.sample, case.other, audio_flamingo_inputs(1, 6, seed=8)]:
        expected = case.model.generate(**inputs, max_new_tokens=8, do_sample=False)
        assert torch.equal(loaded.generate(**inputs, max_new_tokens=8), expected), backend


def _harness_vlm(name: str) -> tuple:
    """A tiny vision-language model built by the coverage harness, its prompt, and a left-padded batch of two images."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    from _coverage_generation import _prompt, _vlm_batch_of_two
    from _tiny_configs import build_case

    case = build_case(name)
    prompt, other = _prompt(case.sample), _vlm_batch_of_two(case)
    assert other is not None and int(other["attention_mask"][0, :2].sum()) == 0
    return case, prompt, other


@pytest.mark.parametrize("name", ["qwen2_vl", "gemma3"])
def test_vision_language_glue_beyond_the_mask_generates_as_eager(name, tmp_path):
    """Two kinds of glue the chain now carries, on tiny models built by the coverage harness:

    * Qwen2-VL's language model takes (text, temporal, height, width) positions that Qwen2VLModel.get_rope_index
      computes from the ids, image marks and grids; generate() runs that method on a weightless Qwen2VLModel holding
      the export's config (the plan names the class; only a transformers model class is accepted), and each decode
      step adds the prompt's deltas;
    * Gemma 3's language model takes masks per layer type that its base model builds (attending both ways within
      an image): the language component is the base model on the merged embeddings, the 2D mask and token types.

    Tokens equal eager generate, for a left-padded batch of two images as well, after a reload."""
    from hub_export.generation._rope_index import model_class

    case, prompt, other = _harness_vlm(name)
    exported = DynamoExporter().export_for_generation(case.model, prompt, config=DynamoConfig(dynamic=True))
    plan = exported.generation
    assert plan["runnable"] is True
    if name == "qwen2_vl":
        assert plan["rope_index"] == {"class": "Qwen2VLModel", "text_row": True}
        for bad in ("os", "PreTrainedModel.__init__", "AutoTokenizer", 3):
            with pytest.raises(HubExportError, match="not a transformers model"):
                model_class(bad)
    else:
        assert "rope_index" not in plan
        inputs = exported.components["language_model"].metadata.signature.inputs
        assert [len(s.shape) for s in inputs if s.name.startswith("attention_mask")] == [2]  # not one per layer type
    loaded = ExportedModel.from_pretrained(exported.save_pretrained(tmp_path / "export"))
    for inputs in (prompt, other):
        expected = case.model.generate(**inputs, max_new_tokens=6, do_sample=False)
        assert torch.equal(loaded.generate(**inputs, max_new_tokens=6), expected)


@pytest.mark.parametrize("name", ["fuyu", "llava_next"])
def test_a_model_generate_encodes_first_exports_its_feature_function_and_whole_prompt_step(name, tmp_path):
    """transformers' generate() runs get_image_features first and hands the prompt step its output
    (mm_encoder_outputs). Where no split chain serves generate() (Fuyu has no separate vision encoder; LLaVA-NeXT
    packs each image's features with its own layout, so they do not fill the placeholders one per position), the
    export follows that: a graph of the feature function, returning only what the prompt step reads (its per-image
    tuple joined into one tensor), then the whole model's prompt step and decode, and the model merges the
    features itself. Tokens equal eager generate for a left-padded batch of two images as well, after a reload."""
    case, prompt, other = _harness_vlm(name)
    exported = DynamoExporter().export_for_generation(case.model, prompt, config=DynamoConfig(dynamic=True))
    plan = exported.generation
    assert list(exported.components) == ["image_encoder_outputs", "prefill", "decode"]
    assert plan["kind"] == "decoder_only" and plan["encoder_outputs"][0]["component"] == "image_encoder_outputs"
    features = exported.components["image_encoder_outputs"].metadata.signature
    read = "pooler_output" if name == "llava_next" else "last_hidden_state"
    assert [field for field, _ in features.output_structure["fields"]] == [read]
    loaded = ExportedModel.from_pretrained(exported.save_pretrained(tmp_path / "export"))
    for inputs in (prompt, other):
        expected = case.model.generate(**inputs, max_new_tokens=6, do_sample=False)
        assert torch.equal(loaded.generate(**inputs, max_new_tokens=6), expected)
    with pytest.raises(InputError, match="prompt step takes image features: generate.. needs"):
        loaded.generate(input_ids=prompt["input_ids"], max_new_tokens=2)  # the prompt step needs the image's features


def test_decode_positions_give_every_rope_row_the_text_position_plus_the_prompt_delta():
    """A decode step's multimodal rotary positions: the text position plus each row's delta on every rope row, three
    unless the plan says otherwise (HunYuan-VL's get_rope_index returns four), after a text row where the language
    model takes one (Qwen2-VL)."""
    from hub_export.generation._rope_index import decode_positions

    positions, deltas = torch.tensor([[7], [9]]), torch.tensor([[-2], [1]])
    qwen = decode_positions({"class": "Qwen2VLModel", "text_row": True}, positions, deltas)
    assert qwen[:, :, 0].tolist() == [[7, 9], [5, 10], [5, 10], [5, 10]]
    hunyuan = decode_positions({"class": "HunYuanVLModel", "text_row": False, "axes": 4}, positions, deltas)
    assert hunyuan[:, :, 0].tolist() == [[5, 10]] * 4
