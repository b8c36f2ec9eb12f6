"""A zoo of tiny architectures built from configs with random weights (nothing is downloaded).

Each entry of :data:`ZOO` maps a name to a factory returning a :class:`~tiny_models.TinyCase`: the model in eval
mode, the sample kwargs to export with, and kwargs of another batch and sequence length. Sizes are tiny (hidden
32, 2 layers) so one export takes seconds. ``benchmarks/coverage.py`` runs the whole zoo through every backend;
``tests/test_zoo.py`` runs a representative slice in CI.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

import torch
from tiny_models import TinyCase, llava, seeded, text_inputs, whisper

__all__ = ["ZOO", "FAMILIES", "build"]

VOCAB = 96
_IDS = {"pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2}


def _make(config_cls: str, model_cls: str, **config: Any) -> Any:
    """Build ``transformers.<model_cls>(transformers.<config_cls>(**config))`` seeded, in eval mode."""
    transformers = importlib.import_module("transformers")
    return seeded(getattr(transformers, model_cls), getattr(transformers, config_cls)(**config))


def _text(name: str, model: Any, *, pad_left: int = 4, types: bool = False) -> TinyCase:
    """A text case: batch 2 x 7 tokens to export, batch 3 x 11 (row 0 left-padded) to run."""
    sample, other = text_inputs(2, 7, VOCAB), text_inputs(3, 11, VOCAB, pad_left=pad_left, seed=1)
    if types:
        sample["token_type_ids"] = torch.zeros(2, 7, dtype=torch.int64)
        other["token_type_ids"] = torch.zeros(3, 11, dtype=torch.int64)
    return TinyCase(name, model, sample, other)


def _ids_only(name: str, model: Any) -> TinyCase:
    """A text case without an attention mask (state-space models)."""
    return TinyCase(
        name,
        model,
        {"input_ids": text_inputs(2, 7, VOCAB)["input_ids"]},
        {"input_ids": text_inputs(3, 11, VOCAB, seed=1)["input_ids"]},
    )


def _seq2seq(name: str, model: Any) -> TinyCase:
    """An encoder-decoder text case: encoder 7 / decoder 3 tokens, then 10 / 5 with another batch."""

    def inputs(batch: int, seq: int, dec: int, seed: int) -> dict[str, Any]:
        base = text_inputs(batch, seq, VOCAB, seed=seed)
        gen = torch.Generator().manual_seed(seed + 7)
        base["decoder_input_ids"] = torch.randint(3, VOCAB, (batch, dec), generator=gen)
        return base

    return TinyCase(name, model, inputs(2, 7, 3, 0), inputs(3, 10, 5, 1))


def _image(name: str, model: Any, size: int = 32, channels: int = 3) -> TinyCase:
    """An image case: 2 images to export, 3 to run (same resolution: most vision models fix it)."""
    gen = torch.Generator().manual_seed(0)
    return TinyCase(
        name,
        model,
        {"pixel_values": torch.randn(2, channels, size, size, generator=gen)},
        {"pixel_values": torch.randn(3, channels, size, size, generator=gen)},
    )


def _audio(name: str, model: Any) -> TinyCase:
    """A raw-waveform case: 2 x 400 samples to export, 3 x 640 to run."""
    gen = torch.Generator().manual_seed(0)
    return TinyCase(
        name,
        model,
        {"input_values": torch.randn(2, 400, generator=gen)},
        {"input_values": torch.randn(3, 640, generator=gen)},
    )


def _image_text(name: str, model: Any, size: int = 32) -> TinyCase:
    """A contrastive image-text case: 2 texts x 2 images, then 3 x 3 with longer text."""
    gen = torch.Generator().manual_seed(0)
    sample = {**text_inputs(2, 7, VOCAB), "pixel_values": torch.randn(2, 3, size, size, generator=gen)}
    other = {**text_inputs(3, 11, VOCAB, seed=1), "pixel_values": torch.randn(3, 3, size, size, generator=gen)}
    return TinyCase(name, model, sample, other)


# ---- shared config fragments -------------------------------------------------------------------------------
_LLAMA_LIKE = dict(
    vocab_size=VOCAB,
    hidden_size=32,
    intermediate_size=64,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=128,
    **_IDS,
)
_BERT_LIKE = dict(
    vocab_size=VOCAB,
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=4,
    intermediate_size=64,
    max_position_embeddings=128,
    pad_token_id=0,
)
_BART_LIKE = dict(
    vocab_size=VOCAB,
    d_model=32,
    encoder_layers=2,
    decoder_layers=2,
    encoder_attention_heads=4,
    decoder_attention_heads=4,
    encoder_ffn_dim=64,
    decoder_ffn_dim=64,
    max_position_embeddings=128,
    decoder_start_token_id=2,
    forced_eos_token_id=None,
    **_IDS,
)
_VIT_LIKE = dict(
    image_size=32,
    patch_size=8,
    num_channels=3,
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=4,
    intermediate_size=64,
    num_labels=5,
)
_T5_LIKE = dict(
    vocab_size=VOCAB,
    d_model=32,
    d_kv=8,
    d_ff=64,
    num_layers=2,
    num_decoder_layers=2,
    num_heads=4,
    decoder_start_token_id=0,
    pad_token_id=0,
    eos_token_id=1,
)
_W2V_LIKE = dict(
    vocab_size=VOCAB,
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=4,
    intermediate_size=64,
    conv_dim=(16, 16),
    conv_stride=(5, 2),
    conv_kernel=(10, 3),
    num_conv_pos_embeddings=16,
    num_conv_pos_embedding_groups=2,
    do_stable_layer_norm=False,
    mask_time_prob=0.0,
)


def _causal(config_cls: str, model_cls: str, **config: Any) -> Callable[[], Any]:
    return lambda: _make(config_cls, model_cls, **config)


# name -> (family, case kind, config class, model class, config kwargs)
_SPECS: dict[str, tuple[str, str, str, str, dict[str, Any]]] = {
    # decoder-only
    "llama": ("decoder", "text", "LlamaConfig", "LlamaForCausalLM", _LLAMA_LIKE),
    "mistral": ("decoder", "text", "MistralConfig", "MistralForCausalLM", {**_LLAMA_LIKE, "sliding_window": 64}),
    "qwen2": ("decoder", "text", "Qwen2Config", "Qwen2ForCausalLM", _LLAMA_LIKE),
    "qwen3": ("decoder", "text", "Qwen3Config", "Qwen3ForCausalLM", {**_LLAMA_LIKE, "head_dim": 8}),
    "gemma": ("decoder", "text", "GemmaConfig", "GemmaForCausalLM", {**_LLAMA_LIKE, "head_dim": 8}),
    "gemma2": (
        "decoder",
        "text",
        "Gemma2Config",
        "Gemma2ForCausalLM",
        {**_LLAMA_LIKE, "head_dim": 8, "sliding_window": 4, "query_pre_attn_scalar": 8},
    ),
    "gemma3_text": (
        "decoder",
        "text",
        "Gemma3TextConfig",
        "Gemma3ForCausalLM",
        {**_LLAMA_LIKE, "head_dim": 8, "sliding_window": 4, "query_pre_attn_scalar": 8},
    ),
    "phi": ("decoder", "text", "PhiConfig", "PhiForCausalLM", _LLAMA_LIKE),
    "phi3": ("decoder", "text", "Phi3Config", "Phi3ForCausalLM", _LLAMA_LIKE),
    "granite": ("decoder", "text", "GraniteConfig", "GraniteForCausalLM", _LLAMA_LIKE),
    "cohere": ("decoder", "text", "CohereConfig", "CohereForCausalLM", _LLAMA_LIKE),
    "olmo": ("decoder", "text", "OlmoConfig", "OlmoForCausalLM", _LLAMA_LIKE),
    "olmo2": ("decoder", "text", "Olmo2Config", "Olmo2ForCausalLM", _LLAMA_LIKE),
    "stablelm": ("decoder", "text", "StableLmConfig", "StableLmForCausalLM", _LLAMA_LIKE),
    "starcoder2": ("decoder", "text", "Starcoder2Config", "Starcoder2ForCausalLM", _LLAMA_LIKE),
    "gpt2": (
        "decoder",
        "text",
        "GPT2Config",
        "GPT2LMHeadModel",
        dict(vocab_size=VOCAB, n_embd=32, n_layer=2, n_head=4, n_positions=128, bos_token_id=1, eos_token_id=2),
    ),
    "gpt_bigcode": (
        "decoder",
        "text",
        "GPTBigCodeConfig",
        "GPTBigCodeForCausalLM",
        dict(vocab_size=VOCAB, n_embd=32, n_layer=2, n_head=4, n_positions=128, bos_token_id=1, eos_token_id=2),
    ),
    "gpt_neox": ("decoder", "text", "GPTNeoXConfig", "GPTNeoXForCausalLM", _LLAMA_LIKE),
    "gptj": (
        "decoder",
        "text",
        "GPTJConfig",
        "GPTJForCausalLM",
        dict(vocab_size=VOCAB, n_embd=32, n_layer=2, n_head=4, n_positions=128, rotary_dim=4, **_IDS),
    ),
    "codegen": (
        "decoder",
        "text",
        "CodeGenConfig",
        "CodeGenForCausalLM",
        dict(vocab_size=VOCAB, n_embd=32, n_layer=2, n_head=4, n_positions=128, n_ctx=128, rotary_dim=4, **_IDS),
    ),
    "falcon": (
        "decoder",
        "text",
        "FalconConfig",
        "FalconForCausalLM",
        dict(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, **_IDS),
    ),
    "opt": (
        "decoder",
        "text",
        "OPTConfig",
        "OPTForCausalLM",
        dict(
            vocab_size=VOCAB,
            hidden_size=32,
            num_hidden_layers=2,
            num_attention_heads=4,
            ffn_dim=64,
            word_embed_proj_dim=32,
            max_position_embeddings=128,
            **_IDS,
        ),
    ),
    "bloom": (
        "decoder",
        "text",
        "BloomConfig",
        "BloomForCausalLM",
        dict(vocab_size=VOCAB, hidden_size=32, n_layer=2, n_head=4, **_IDS),
    ),
    # mixture of experts
    "mixtral": (
        "moe",
        "text",
        "MixtralConfig",
        "MixtralForCausalLM",
        {**_LLAMA_LIKE, "num_local_experts": 4, "num_experts_per_tok": 2},
    ),
    "qwen2_moe": (
        "moe",
        "text",
        "Qwen2MoeConfig",
        "Qwen2MoeForCausalLM",
        {
            **_LLAMA_LIKE,
            "num_experts": 4,
            "num_experts_per_tok": 2,
            "moe_intermediate_size": 32,
            "shared_expert_intermediate_size": 32,
        },
    ),
    "qwen3_moe": (
        "moe",
        "text",
        "Qwen3MoeConfig",
        "Qwen3MoeForCausalLM",
        {**_LLAMA_LIKE, "head_dim": 8, "num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 32},
    ),
    "olmoe": (
        "moe",
        "text",
        "OlmoeConfig",
        "OlmoeForCausalLM",
        {**_LLAMA_LIKE, "num_experts": 4, "num_experts_per_tok": 2},
    ),
    # state-space
    "mamba": (
        "ssm",
        "ids",
        "MambaConfig",
        "MambaForCausalLM",
        dict(vocab_size=VOCAB, hidden_size=32, state_size=8, num_hidden_layers=2, expand=2, conv_kernel=4, **_IDS),
    ),
    "mamba2": (
        "ssm",
        "ids",
        "Mamba2Config",
        "Mamba2ForCausalLM",
        dict(
            vocab_size=VOCAB,
            hidden_size=32,
            state_size=8,
            num_hidden_layers=2,
            expand=2,
            conv_kernel=4,
            num_heads=8,
            head_dim=8,
            n_groups=1,
            chunk_size=16,
            **_IDS,
        ),
    ),
    # encoders
    "bert": ("encoder", "types", "BertConfig", "BertForSequenceClassification", {**_BERT_LIKE, "num_labels": 3}),
    "roberta": ("encoder", "text", "RobertaConfig", "RobertaForMaskedLM", {**_BERT_LIKE, "pad_token_id": 1}),
    "xlm_roberta": (
        "encoder",
        "text",
        "XLMRobertaConfig",
        "XLMRobertaForSequenceClassification",
        {**_BERT_LIKE, "pad_token_id": 1, "num_labels": 3},
    ),
    "camembert": ("encoder", "text", "CamembertConfig", "CamembertForMaskedLM", {**_BERT_LIKE, "pad_token_id": 1}),
    "deberta": (
        "encoder",
        "text",
        "DebertaConfig",
        "DebertaForSequenceClassification",
        {**_BERT_LIKE, "num_labels": 3, "type_vocab_size": 0},
    ),
    "deberta_v2": ("encoder", "text", "DebertaV2Config", "DebertaV2ForMaskedLM", {**_BERT_LIKE, "type_vocab_size": 0}),
    "distilbert": (
        "encoder",
        "text",
        "DistilBertConfig",
        "DistilBertForSequenceClassification",
        dict(
            vocab_size=VOCAB,
            dim=32,
            n_layers=2,
            n_heads=4,
            hidden_dim=64,
            max_position_embeddings=128,
            pad_token_id=0,
            num_labels=3,
        ),
    ),
    "albert": ("encoder", "types", "AlbertConfig", "AlbertForMaskedLM", {**_BERT_LIKE, "embedding_size": 16}),
    "electra": (
        "encoder",
        "types",
        "ElectraConfig",
        "ElectraForSequenceClassification",
        {**_BERT_LIKE, "embedding_size": 16, "num_labels": 3},
    ),
    "mpnet": ("encoder", "text", "MPNetConfig", "MPNetForMaskedLM", {**_BERT_LIKE, "pad_token_id": 1}),
    "modernbert": (
        "encoder",
        "text",
        "ModernBertConfig",
        "ModernBertForMaskedLM",
        dict(
            vocab_size=VOCAB,
            hidden_size=32,
            num_hidden_layers=2,
            num_attention_heads=4,
            intermediate_size=64,
            max_position_embeddings=128,
            local_attention=8,
            cls_token_id=1,
            sep_token_id=2,
            **_IDS,
        ),
    ),
    # encoder-decoders
    "t5": ("seq2seq", "seq2seq", "T5Config", "T5ForConditionalGeneration", _T5_LIKE),
    "mt5": ("seq2seq", "seq2seq", "MT5Config", "MT5ForConditionalGeneration", _T5_LIKE),
    "bart": ("seq2seq", "seq2seq", "BartConfig", "BartForConditionalGeneration", _BART_LIKE),
    "mbart": ("seq2seq", "seq2seq", "MBartConfig", "MBartForConditionalGeneration", _BART_LIKE),
    "marian": ("seq2seq", "seq2seq", "MarianConfig", "MarianMTModel", {**_BART_LIKE, "decoder_vocab_size": VOCAB}),
    "pegasus": ("seq2seq", "seq2seq", "PegasusConfig", "PegasusForConditionalGeneration", _BART_LIKE),
    "m2m_100": ("seq2seq", "seq2seq", "M2M100Config", "M2M100ForConditionalGeneration", _BART_LIKE),
    "blenderbot": ("seq2seq", "seq2seq", "BlenderbotConfig", "BlenderbotForConditionalGeneration", _BART_LIKE),
    # vision
    "vit": ("vision", "image", "ViTConfig", "ViTForImageClassification", _VIT_LIKE),
    "deit": ("vision", "image", "DeiTConfig", "DeiTForImageClassification", _VIT_LIKE),
    "beit": ("vision", "image", "BeitConfig", "BeitForImageClassification", _VIT_LIKE),
    "dinov2": ("vision", "image", "Dinov2Config", "Dinov2Model", {**_VIT_LIKE, "mlp_ratio": 2}),
    "resnet": (
        "vision",
        "image",
        "ResNetConfig",
        "ResNetForImageClassification",
        dict(embedding_size=16, hidden_sizes=[16, 32], depths=[1, 1], layer_type="basic", num_labels=5),
    ),
    "convnext": (
        "vision",
        "image",
        "ConvNextConfig",
        "ConvNextForImageClassification",
        dict(num_stages=2, hidden_sizes=[16, 32], depths=[1, 1], num_labels=5),
    ),
    "convnextv2": (
        "vision",
        "image",
        "ConvNextV2Config",
        "ConvNextV2ForImageClassification",
        dict(num_stages=2, hidden_sizes=[16, 32], depths=[1, 1], num_labels=5),
    ),
    "swin": (
        "vision",
        "image",
        "SwinConfig",
        "SwinForImageClassification",
        dict(image_size=32, patch_size=4, embed_dim=16, depths=[1, 1], num_heads=[2, 4], window_size=4, num_labels=5),
    ),
    "regnet": (
        "vision",
        "image",
        "RegNetConfig",
        "RegNetForImageClassification",
        dict(embedding_size=16, hidden_sizes=[16, 32], depths=[1, 1], groups_width=8, num_labels=5),
    ),
    "mobilevit": (
        "vision",
        "image",
        "MobileViTConfig",
        "MobileViTForImageClassification",
        dict(
            image_size=32,
            patch_size=2,
            hidden_sizes=[16, 24, 32],
            neck_hidden_sizes=[8, 8, 16, 16, 24, 24, 32],
            num_labels=5,
        ),
    ),
    "segformer": (
        "vision",
        "image",
        "SegformerConfig",
        "SegformerForSemanticSegmentation",
        dict(
            num_encoder_blocks=2,
            depths=[1, 1],
            sr_ratios=[2, 1],
            hidden_sizes=[16, 32],
            num_attention_heads=[1, 2],
            decoder_hidden_size=32,
            num_labels=5,
        ),
    ),
    # audio
    "wav2vec2": ("audio", "audio", "Wav2Vec2Config", "Wav2Vec2ForCTC", _W2V_LIKE),
    "hubert": ("audio", "audio", "HubertConfig", "HubertForCTC", _W2V_LIKE),
    "wavlm": ("audio", "audio", "WavLMConfig", "WavLMForCTC", {**_W2V_LIKE, "num_buckets": 16}),
    # multimodal
    "clip": ("multimodal", "image_text", "CLIPConfig", "CLIPModel", {}),
    "siglip": ("multimodal", "image_text", "SiglipConfig", "SiglipModel", {}),
}

_TOWER = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64)
_TOWERS = {
    "clip": dict(
        text_config={**_TOWER, "vocab_size": VOCAB, "max_position_embeddings": 32, **_IDS},
        vision_config={**_TOWER, "image_size": 32, "patch_size": 8},
        projection_dim=16,
    ),
    "siglip": dict(
        text_config={**_TOWER, "vocab_size": VOCAB, "max_position_embeddings": 32, **_IDS},
        vision_config={**_TOWER, "image_size": 32, "patch_size": 8},
    ),
}


def _factory(name: str) -> Callable[..., TinyCase]:
    _family, kind, config_cls, model_cls, config = _SPECS[name]
    config = {**config, **_TOWERS.get(name, {})}

    def build_case(**overrides: Any) -> TinyCase:
        model = _make(config_cls, model_cls, **{**config, **overrides})
        if kind == "text":
            return _text(name, model)
        if kind == "types":
            return _text(name, model, types=True)
        if kind == "ids":
            return _ids_only(name, model)
        if kind == "seq2seq":
            return _seq2seq(name, model)
        if kind == "image":
            return _image(name, model)
        if kind == "audio":
            return _audio(name, model)
        return _image_text(name, model)

    build_case.__name__ = name
    return build_case


ZOO: dict[str, Callable[..., TinyCase]] = {name: _factory(name) for name in _SPECS}
ZOO["whisper"] = whisper  # the tiny Whisper of tiny_models (an encoder-decoder taking mel features)
ZOO["llava"] = llava  # a vision-language model (CLIP tower + projector + Llama), with its placeholder tokens

#: name -> family (decoder, moe, ssm, encoder, seq2seq, vision, audio, multimodal)
FAMILIES: dict[str, str] = {name: spec[0] for name, spec in _SPECS.items()} | {"whisper": "seq2seq", "llava": "vlm"}


def build(name: str, **overrides: Any) -> TinyCase:
    """Build a fresh zoo case by name; ``overrides`` replace entries of its config (an entry of :data:`ZOO` built
    from a config spec only), such as ``num_hidden_layers=1`` where a second layer proves nothing more."""
    return ZOO[name](**overrides)
