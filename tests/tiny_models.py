"""Tiny models built from configs with random weights (nothing is downloaded), with sample inputs.

Each case gives the model, the sample kwargs to export with, and kwargs of another batch and sequence length
to run the export on. Every test module takes its models from here.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

__all__ = ["TinyCase", "CASES", "GENERATIVE", "build", "llava_inputs", "seeded", "text_inputs"]


@dataclass
class TinyCase:
    """A tiny model and its inputs."""

    name: str
    model: Any
    sample: dict[str, Any]
    other: dict[str, Any]


class EmbeddingHead(torch.nn.Module):
    """Embedding, tanh and a linear head (a dict output): the smallest model whose weights are large enough to go to
    ONNX external data, an OpenVINO .bin and ExecuTorch segments, with one portable kernel and one XNNPACK delegate.
    The safety tests build their hostile variants from exports of it."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.embed = torch.nn.Embedding(64, 32)
        self.head = torch.nn.Linear(32, 64)

    def forward(self, input_ids: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"logits": self.head(torch.tanh(self.embed(input_ids)))}


#: The ids every export of :class:`EmbeddingHead` is traced with.
EMBEDDING_HEAD_SAMPLE = {"input_ids": torch.tensor([[1, 5, 9, 3]])}


def embedding_head_export(kind: str) -> Path:
    """The saved export of :class:`EmbeddingHead` on :data:`EMBEDDING_HEAD_SAMPLE` that several test modules read:
    ``kind`` is a format with its default config, or ``"pt2-dynamic"`` (``DynamoConfig(dynamic=True)``). Made once
    per test run by whichever xdist worker asks first (a file lock in the run's folder, conftest.py's
    ``HUB_EXPORT_TEST_EXPORTS``). Never change it: copy it first."""
    from filelock import FileLock

    from hub_export import (
        DynamoConfig,
        DynamoExporter,
        ExecutorchConfig,
        ExecutorchExporter,
        OnnxConfig,
        OnnxExporter,
        OpenVINOConfig,
        OpenVINOExporter,
    )

    exporters = {
        "pt2": (DynamoExporter, DynamoConfig()),
        "pt2-dynamic": (DynamoExporter, DynamoConfig(dynamic=True)),
        "onnx": (OnnxExporter, OnnxConfig()),
        "openvino": (OpenVINOExporter, OpenVINOConfig()),
        "executorch": (ExecutorchExporter, ExecutorchConfig()),
    }
    exporter, config = exporters[kind]
    if not os.environ.get("HUB_EXPORT_TEST_EXPORTS"):  # conftest.py sets it; a process of its own otherwise
        os.environ["HUB_EXPORT_TEST_EXPORTS"] = tempfile.mkdtemp(prefix="hub-export-test-exports-")
    root = Path(os.environ["HUB_EXPORT_TEST_EXPORTS"])
    folder = root / f"embedding-head-{kind}"
    with FileLock(f"{folder}.lock"):
        if not folder.is_dir():
            partial = root / f"{folder.name}.partial"
            shutil.rmtree(partial, ignore_errors=True)
            exporter().export(EmbeddingHead().eval(), EMBEDDING_HEAD_SAMPLE, config=config).save_pretrained(partial)
            partial.rename(folder)
    return folder


def text_inputs(batch: int, seq: int, vocab: int = 96, *, pad_left: int = 0, seed: int = 0) -> dict[str, Any]:
    """``input_ids`` + ``attention_mask`` (an all-ones mask unless ``pad_left`` zeros the first tokens of row 0)."""
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, vocab, (batch, seq), generator=gen)
    mask = torch.ones(batch, seq, dtype=torch.int64)
    if pad_left:
        mask[0, :pad_left] = 0
    return {"input_ids": ids, "attention_mask": mask}


def seeded(model_class: Callable[[Any], Any], config: Any) -> Any:
    """``model_class(config)`` in eval mode, its random weights seeded: the same model on every build."""
    torch.manual_seed(0)
    return model_class(config).eval()


def llama(layers: int = 2, head_dim: int | None = None) -> TinyCase:
    """A tiny Llama (GQA: 4 heads, 2 KV heads); ``head_dim`` widens the heads past ``hidden_size // heads`` (8), as
    real LLMs' 128 (kernels pick other code paths for heads over 64)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=96,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=head_dim,
        max_position_embeddings=128,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
    )
    return TinyCase(
        "llama", seeded(LlamaForCausalLM, config), text_inputs(1, 7), text_inputs(3, 11, pad_left=4, seed=1)
    )


def gpt2(layers: int = 2) -> TinyCase:
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(
        vocab_size=96, n_embd=32, n_layer=layers, n_head=4, n_positions=128, bos_token_id=1, eos_token_id=2
    )
    return TinyCase("gpt2", seeded(GPT2LMHeadModel, config), text_inputs(2, 6), text_inputs(3, 9, pad_left=2, seed=1))


def bert(layers: int = 2) -> TinyCase:
    from transformers import BertConfig, BertForSequenceClassification

    config = BertConfig(
        vocab_size=96,
        hidden_size=32,
        num_hidden_layers=layers,
        num_attention_heads=4,
        intermediate_size=64,
        max_position_embeddings=128,
        num_labels=3,
    )
    sample = {**text_inputs(2, 8), "token_type_ids": torch.zeros(2, 8, dtype=torch.int64)}
    other = {**text_inputs(4, 13, pad_left=3, seed=1), "token_type_ids": torch.zeros(4, 13, dtype=torch.int64)}
    return TinyCase("bert", seeded(BertForSequenceClassification, config), sample, other)


def t5(layers: int = 2) -> TinyCase:
    from transformers import T5Config, T5ForConditionalGeneration

    config = T5Config(
        vocab_size=96,
        d_model=32,
        d_kv=8,
        d_ff=64,
        num_layers=layers,
        num_decoder_layers=layers,
        num_heads=4,
        decoder_start_token_id=0,
        pad_token_id=0,
        eos_token_id=1,
    )

    def inputs(batch: int, seq: int, dec: int, seed: int) -> dict[str, Any]:
        base = text_inputs(batch, seq, seed=seed)
        base["decoder_input_ids"] = torch.randint(
            3, 96, (batch, dec), generator=torch.Generator().manual_seed(seed + 7)
        )
        return base

    return TinyCase("t5", seeded(T5ForConditionalGeneration, config), inputs(2, 7, 3, 0), inputs(3, 10, 5, 1))


def vit(layers: int = 2) -> TinyCase:
    from transformers import ViTConfig, ViTForImageClassification

    config = ViTConfig(
        image_size=32,
        patch_size=8,
        num_channels=3,
        hidden_size=32,
        num_hidden_layers=layers,
        num_attention_heads=4,
        intermediate_size=64,
        num_labels=5,
    )
    gen = torch.Generator().manual_seed(0)
    return TinyCase(
        "vit",
        seeded(ViTForImageClassification, config),
        {"pixel_values": torch.randn(2, 3, 32, 32, generator=gen)},
        {"pixel_values": torch.randn(3, 3, 32, 32, generator=gen)},
    )


def whisper(layers: int = 2) -> TinyCase:
    from transformers import WhisperConfig, WhisperForConditionalGeneration

    config = WhisperConfig(
        vocab_size=96,
        num_mel_bins=16,
        encoder_layers=layers,
        decoder_layers=layers,
        d_model=32,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        encoder_ffn_dim=64,
        decoder_ffn_dim=64,
        max_source_positions=30,
        max_target_positions=64,
        decoder_start_token_id=1,
        pad_token_id=0,
        eos_token_id=2,
        bos_token_id=1,
        suppress_tokens=[],
        begin_suppress_tokens=[],
    )
    gen = torch.Generator().manual_seed(0)

    def inputs(batch: int, dec: int) -> dict[str, Any]:
        return {
            "input_features": torch.randn(batch, 16, 60, generator=gen),
            "decoder_input_ids": torch.randint(3, 96, (batch, dec), generator=gen),
        }

    return TinyCase("whisper", seeded(WhisperForConditionalGeneration, config), inputs(2, 3), inputs(3, 5))


def qwen3() -> TinyCase:
    """A tiny Qwen3 (q/k norms, GQA); not in :data:`CASES`: generation tests build it by name."""
    from transformers import Qwen3Config, Qwen3ForCausalLM

    config = Qwen3Config(
        vocab_size=96,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        max_position_embeddings=128,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
    )
    return TinyCase(
        "qwen3", seeded(Qwen3ForCausalLM, config), text_inputs(1, 7), text_inputs(3, 11, pad_left=4, seed=1)
    )


LLAVA_IMAGE_TOKEN = 95
LLAVA_IMAGE_TOKENS = 16  # (16 / 4) ** 2 patches of a 16x16 image, CLS dropped


def llava_inputs(batch: int, text: int, *, pad_left: int = 0, seed: int = 0, image: bool = True) -> dict[str, Any]:
    """A LLaVA prompt as its processor builds it: 2 text tokens, one placeholder per image feature, ``text``
    tokens (left padding zeroes the first tokens of row 0), and the pixels (unless ``image=False``)."""
    gen = torch.Generator().manual_seed(seed)
    parts = [torch.randint(3, 90, (batch, 2), generator=gen)]
    if image:
        parts.append(torch.full((batch, LLAVA_IMAGE_TOKENS), LLAVA_IMAGE_TOKEN))
    parts.append(torch.randint(3, 90, (batch, text), generator=gen))
    ids = torch.cat(parts, dim=1)
    mask = torch.ones_like(ids)
    if pad_left:
        ids[0, :pad_left], mask[0, :pad_left] = 0, 0
    inputs = {"input_ids": ids, "attention_mask": mask}
    if image:
        inputs["pixel_values"] = torch.randn(batch, 3, 16, 16, generator=gen)
    return inputs


def llava(text_layers: int = 2) -> TinyCase:
    """A tiny LLaVA (CLIP vision tower, 2-layer projector, Llama text model of ``text_layers``) built from a config."""
    from transformers import CLIPVisionConfig, LlamaConfig, LlavaConfig, LlavaForConditionalGeneration

    vision = CLIPVisionConfig(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        image_size=16,
        patch_size=4,
        projection_dim=32,
    )
    text = LlamaConfig(
        vocab_size=96,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=text_layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
    )
    config = LlavaConfig(
        vision_config=vision.to_dict(),
        text_config=text.to_dict(),
        image_token_id=LLAVA_IMAGE_TOKEN,
        vision_feature_layer=-2,
        vision_feature_select_strategy="default",
        image_seq_length=LLAVA_IMAGE_TOKENS,
    )
    return TinyCase(
        "llava",
        seeded(LlavaForConditionalGeneration, config),
        llava_inputs(1, 5),
        llava_inputs(2, 6, pad_left=1, seed=3),
    )


AUDIO_TOKEN = 95


def audio_flamingo_inputs(batch: int, text: int, *, seed: int = 0) -> dict[str, Any]:
    """An AudioFlamingo3 prompt: 2 text tokens, one placeholder per audio feature (15 for 60 mel frames after
    the encoder's conv and pooling), ``text`` tokens, and the mel features with their mask."""
    gen = torch.Generator().manual_seed(seed)
    ids = torch.cat(
        [
            torch.randint(3, 90, (batch, 2), generator=gen),
            torch.full((batch, 15), AUDIO_TOKEN),
            torch.randint(3, 90, (batch, text), generator=gen),
        ],
        dim=1,
    )
    return {
        "input_ids": ids,
        "attention_mask": torch.ones_like(ids),
        "input_features": torch.randn(batch, 16, 60, generator=gen),
        "input_features_mask": torch.ones(batch, 60, dtype=torch.int64),
    }


def audio_flamingo(text_layers: int = 2) -> TinyCase:
    """A tiny AudioFlamingo3 (Whisper-like audio encoder, projector, Qwen2 text model of ``text_layers``) built from
    a config."""
    from transformers import AudioFlamingo3Config, AudioFlamingo3ForConditionalGeneration

    config = AudioFlamingo3Config(
        audio_config=dict(
            model_type="audioflamingo3_encoder",
            num_mel_bins=16,
            num_hidden_layers=2,
            num_attention_heads=4,
            intermediate_size=64,
            hidden_size=32,
            max_source_positions=30,
        ),
        text_config=dict(
            model_type="qwen2",
            vocab_size=96,
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=text_layers,
            num_attention_heads=4,
            num_key_value_heads=2,
            max_position_embeddings=128,
            pad_token_id=0,
            bos_token_id=1,
            eos_token_id=2,
        ),
        audio_token_id=AUDIO_TOKEN,
    )
    return TinyCase(
        "audio_flamingo",
        seeded(AudioFlamingo3ForConditionalGeneration, config),
        audio_flamingo_inputs(1, 3),
        audio_flamingo_inputs(2, 5, seed=3),
    )


CASES: dict[str, Callable[..., TinyCase]] = {
    "llama": llama,
    "gpt2": gpt2,
    "bert": bert,
    "t5": t5,
    "vit": vit,
    "whisper": whisper,
}


#: Generative models used only by the generation tests.
GENERATIVE: dict[str, Callable[[], TinyCase]] = {"qwen3": qwen3, "llava": llava, "audio_flamingo": audio_flamingo}


def build(name: str, layers: int | None = None) -> TinyCase:
    """Build a fresh case by name; ``layers`` (the :data:`CASES` only) sets the number of layers of each stack.

    Two layers by default. One layer proves the same for a test of a single call (not of a cache's layers): lowering
    time grows with the graph, so the slowest backend's tests take one."""
    factory = {**CASES, **GENERATIVE}[name]
    return factory() if layers is None else factory(layers)
