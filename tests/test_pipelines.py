"""pipeline(task, model=ExportedModel.from_pretrained(...)) gives the eager model's pipeline output, for every task a
user runs: transformers.pipeline itself takes the export; hub_export.pipeline (same arguments) also checks an
export by its architecture and serves text2text-generation, which transformers 5 removed."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import transformers
from tiny_models import build
from tiny_tokenizers import bert_tokenizer, llama_tokenizer, t5_tokenizer, whisper_tokenizer

import hub_export
from hub_export import ExportedModel, OnnxConfig, OnnxExporter, OpenVINOConfig, OpenVINOExporter

_BERT = {
    "vocab_size": 96,
    "hidden_size": 32,
    "num_hidden_layers": 1,  # the pipelines do not depend on the layers
    "num_attention_heads": 4,
    "intermediate_size": 64,
    "max_position_embeddings": 128,
}


def _same(produced, expected, atol: float = 1e-5) -> None:
    """Equal structure, labels, words and token ids; scores and features within ``atol``."""
    if isinstance(expected, dict):
        assert produced.keys() == expected.keys()
        for key in expected:
            _same(produced[key], expected[key], atol)
    elif isinstance(expected, (list, tuple)):
        assert len(produced) == len(expected)
        for a, b in zip(produced, expected):
            _same(a, b, atol)
    elif isinstance(expected, (float, np.floating)):
        assert abs(float(produced) - float(expected)) <= atol, (produced, expected)
    elif isinstance(expected, (np.ndarray, torch.Tensor)):
        assert np.allclose(np.asarray(produced), np.asarray(expected), atol=atol)
    else:
        assert produced == expected


def _saved(exported, tmp_path, name: str) -> ExportedModel:
    return ExportedModel.from_pretrained(exported.save_pretrained(tmp_path / name))


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return tmp_path_factory.mktemp("pipelines")


@pytest.fixture
def quiet_check(monkeypatch):
    """Records what the pipelines' model check logs (transformers logs an error for a class it does not know)."""
    logged = []
    monkeypatch.setattr(transformers.pipelines.base.logger, "error", lambda message, *a: logged.append(message))
    return logged


# -- text generation (GenerationMixin over the graphs) ------------------------------------------------------
@pytest.mark.parametrize("exporter,config", [(OnnxExporter, OnnxConfig), (OpenVINOExporter, OpenVINOConfig)])
def test_text_generation(folder, quiet_check, exporter, config):
    model, tokenizer = build("llama", layers=1).model, llama_tokenizer()
    exported = exporter().export_for_generation(
        model, tokenizer(["the cat sat"], return_tensors="pt"), config=config(dynamic=True)
    )
    loaded = _saved(exported, folder, f"llama-{exporter.__name__}")
    prompts = ["the cat sat on the mat", "birds sang"]
    runs = [
        {"max_new_tokens": 8, "do_sample": False},
        {"max_new_tokens": 8, "num_beams": 3, "do_sample": False, "batch_size": 2},
        {"max_new_tokens": 8, "do_sample": True, "temperature": 0.7, "top_k": 30},  # the pipeline's defaults
        {"max_new_tokens": 8, "do_sample": False, "return_full_text": False, "stop_sequence": "sang"},
    ]
    for settings in runs:
        outputs = []
        for make, runner in (
            (transformers.pipeline, model),
            (transformers.pipeline, loaded),
            (hub_export.pipeline, loaded),
        ):
            torch.manual_seed(0)
            outputs.append(make("text-generation", model=runner, tokenizer=tokenizer)(prompts, **settings))
        _same(outputs[1], outputs[0])
        _same(outputs[2], outputs[0])
    # transformers' own pipeline logged that it does not know the class; hub_export's checks the architecture
    assert len([m for m in quiet_check if "ExportedModelForCausalLM" in m]) == len(runs)


# -- text2text generation (removed from transformers 5: hub_export.pipeline serves it) ---------------------
def test_text2text_generation(folder):
    model, tokenizer = build("t5", layers=1).model, t5_tokenizer()  # the pipeline does not depend on the layers
    exported = OnnxExporter().export_for_generation(
        model, tokenizer(["the cat sat on the mat"], return_tensors="pt"), config=OnnxConfig(dynamic=True)
    )
    loaded = _saved(exported, folder, "t5")
    with pytest.raises(KeyError, match="has been removed from transformers"):
        transformers.pipeline("text2text-generation", model=model, tokenizer=tokenizer)
    texts = ["the cat sat on the mat", "birds sang in trees"]
    for settings in ({"max_new_tokens": 6}, {"max_new_tokens": 6, "num_beams": 3, "num_return_sequences": 2}):
        expected = hub_export.pipeline("text2text-generation", model=model, tokenizer=tokenizer)(texts, **settings)
        produced = hub_export.pipeline("text2text-generation", model=loaded, tokenizer=tokenizer)(texts, **settings)
        _same(produced, expected)
        direct = tokenizer.batch_decode(model.generate(**tokenizer(texts[:1], return_tensors="pt"), max_new_tokens=6))
        assert (
            settings.get("num_beams")
            or expected[0]["generated_text"] == direct[0].replace("<pad>", "").replace("</s>", "").strip()
        )
    assert hub_export.pipeline(model=loaded, tokenizer=tokenizer).task == "text2text-generation"  # inferred


# -- classification, token classification, fill-mask, feature extraction (single graphs) -------------------
@pytest.mark.parametrize(
    "task,model_class,extra,inputs,call",
    [
        (
            "text-classification",
            "BertForSequenceClassification",
            {"num_labels": 3},
            [{"text": "the cat sat", "text_pair": "on the mat"}, "a dog ran to park"],
            {"top_k": None},
        ),
        ("token-classification", "BertForTokenClassification", {"num_labels": 5}, ["the cat sat on the mat"], {}),
        ("fill-mask", "BertForMaskedLM", {}, ["the cat [MASK] on the mat", "birds [MASK] in trees"], {"top_k": 3}),
        ("feature-extraction", "BertModel", {}, ["the cat sat on the mat", "birds sang"], {}),
    ],
)
def test_encoder_tasks(folder, task, model_class, extra, inputs, call):
    torch.manual_seed(0)
    model = getattr(transformers, model_class)(transformers.BertConfig(**_BERT, **extra)).eval()
    tokenizer = bert_tokenizer()
    sample = tokenizer(["the cat sat", "a dog ran to the park"], padding=True, return_tensors="pt")
    sample = {k: v for k, v in sample.items() if k != "token_type_ids"}  # the config implies them: traced anyway
    loaded = _saved(OnnxExporter().export(model, sample, config=OnnxConfig(dynamic=True)), folder, task)
    expected = transformers.pipeline(task, model=model, tokenizer=tokenizer)(inputs, **call)
    for make in (transformers.pipeline, hub_export.pipeline):
        _same(make(task, model=loaded, tokenizer=tokenizer)(inputs, **call), expected, atol=1e-6)


# -- image classification ----------------------------------------------------------------------------------
def test_image_classification(folder):
    pytest.importorskip("PIL", reason="transformers' image processors need Pillow (the test extra) or torchvision")
    from PIL import Image
    from transformers.models.vit.image_processing_pil_vit import ViTImageProcessorPil

    case = build("vit", layers=1)
    processor = ViTImageProcessorPil(size={"height": 32, "width": 32})
    loaded = _saved(OnnxExporter().export(case.model, case.sample, config=OnnxConfig(dynamic=True)), folder, "vit")
    rng = np.random.default_rng(0)
    images = [Image.fromarray(rng.integers(0, 255, (40 + 8 * i, 48, 3), dtype=np.uint8)) for i in range(3)]
    expected = transformers.pipeline("image-classification", model=case.model, image_processor=processor)(images)
    for make in (transformers.pipeline, hub_export.pipeline):
        _same(make("image-classification", model=loaded, image_processor=processor)(images), expected)


# -- speech recognition (Whisper: encoder, then GenerationMixin over the decoder graphs) ---------------------
def test_automatic_speech_recognition(folder):
    config = transformers.WhisperConfig(
        vocab_size=96,
        num_mel_bins=16,
        encoder_layers=1,
        decoder_layers=1,
        d_model=32,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        encoder_ffn_dim=64,
        decoder_ffn_dim=64,
        max_source_positions=50,  # 100 frames: one second of audio
        max_target_positions=64,
        decoder_start_token_id=94,
        pad_token_id=93,
        eos_token_id=93,
        bos_token_id=93,
        suppress_tokens=[],
        begin_suppress_tokens=[],
        init_std=0.2,
    )
    torch.manual_seed(0)
    model = transformers.WhisperForConditionalGeneration(config).eval()
    tokenizer = whisper_tokenizer()
    extractor = transformers.WhisperFeatureExtractor(feature_size=16, chunk_length=1)
    rng = np.random.default_rng(0)
    audio = [rng.standard_normal(n).astype("float32") * 0.1 for n in (12000, 7000, 16000)]
    sample = {"input_features": extractor(audio[0], sampling_rate=16000, return_tensors="pt")["input_features"]}
    loaded = _saved(
        OnnxExporter().export_for_generation(model, sample, config=OnnxConfig(dynamic=True)), folder, "whisper"
    )
    settings = {"generate_kwargs": {"max_new_tokens": 8}}
    pipe = {"tokenizer": tokenizer, "feature_extractor": extractor}
    expected = transformers.pipeline("automatic-speech-recognition", model=model, **pipe)(audio, **settings)
    assert len({r["text"] for r in expected}) > 1  # the audio matters
    for make in (transformers.pipeline, hub_export.pipeline):
        _same(make("automatic-speech-recognition", model=loaded, **pipe)(audio, **settings), expected)
