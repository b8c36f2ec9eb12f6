"""Tiny configs and sample inputs for every architecture of transformers' auto mappings (``coverage.py --all``).

Nothing here is hand-picked per architecture except :data:`OVERRIDES` (each entry with the reason the shrinker
cannot know it):

* :func:`enumerate_architectures` lists every model type of the covered auto mappings with the head it is
  exported with (the first of :data:`HEADS` that maps the type; AutoModel, "feature-extraction", as the fallback)
  and, where the type cannot run here, the reason it is skipped.
* :func:`tiny_config` starts from the config class's defaults and shrinks every size field it recognises by name
  (hidden/intermediate sizes, layers with their per-layer type lists, heads and key/value heads kept consistent,
  head dims, vocab and the special token ids, positions, image/patch/window sizes, audio feature sizes, experts,
  LoRA ranks...), recursively through nested sub-configs (text/vision/audio/encoder/decoder/backbone...).
* :func:`build_case` builds the model with random weights and finds sample inputs from the model's main input
  name and config, using eager PyTorch as the oracle: candidate layouts are tried in order and the first one the
  model runs is kept (and the "other" inputs, another batch and length, fall back to another batch at the same
  length when the model pins its length). Placeholder token counts of image-text-to-text models are read from the
  model's own mismatch error.

Run it directly to probe builds: ``python benchmarks/_tiny_configs.py [model_type ...]``.
"""

from __future__ import annotations

import copy
import functools
import inspect
import math
import re
from dataclasses import dataclass, field
from typing import Any

from _sample_inputs import _get  # the first set field of a config (shared with the sample builders)

__all__ = [
    "HEADS",
    "OVERRIDES",
    "Arch",
    "BuildSkip",
    "arch_of",
    "Case",
    "build_case",
    "enumerate_architectures",
    "skip_reason",
    "tiny_config",
]

#: (head, auto mapping) in the order a model type's head is chosen; the first mapping holding the type wins
HEADS: list[tuple[str, str]] = [
    ("image-text-to-text", "MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES"),
    ("speech-seq2seq", "MODEL_FOR_SPEECH_SEQ_2_SEQ_MAPPING_NAMES"),
    ("seq2seq-lm", "MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES"),
    ("ctc", "MODEL_FOR_CTC_MAPPING_NAMES"),
    ("masked-lm", "MODEL_FOR_MASKED_LM_MAPPING_NAMES"),
    ("causal-lm", "MODEL_FOR_CAUSAL_LM_MAPPING_NAMES"),
    ("image-classification", "MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING_NAMES"),
    ("sequence-classification", "MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES"),
    ("token-classification", "MODEL_FOR_TOKEN_CLASSIFICATION_MAPPING_NAMES"),
    ("feature-extraction", "MODEL_MAPPING_NAMES"),
]

# ---- target sizes -------------------------------------------------------------------------------------------
HIDDEN = 32
FFN = 64
MOE_FFN = 32
HEADS_N = 4
KV_HEADS = 2
HEAD_DIM = 8
VOCAB = 256
POSITIONS = 512
IMAGE = 64
PATCH = 8
EXPERTS = 4
TOP_K = 2
MAX_LAYERS = 4  # per-layer type lists keep one layer per distinct kind, up to this many

#: model type -> (config overrides applied after shrinking, the reason the shrinker cannot know it)
#: (applied to every config level of that model type, nested sub-configs included)
OVERRIDES: dict[str, tuple[dict[str, Any], str]] = {
    "efficientnet": (
        {
            "width_coefficient": 1.0,
            "depth_coefficient": 1.0,
            "in_channels": None,
            "out_channels": None,
            "hidden_dim": 1280,
        },
        "the stem (32) and head (1280) widths are constants of the modeling code, scaled by width_coefficient: "
        "the channel lists and hidden_dim must stay the B0 ones",
    ),
    "align_vision_model": (
        {
            "width_coefficient": 1.0,
            "depth_coefficient": 1.0,
            "in_channels": None,
            "out_channels": None,
            "hidden_dim": 1280,
        },
        "ALIGN's vision tower is EfficientNet (see efficientnet)",
    ),
    "align": (
        {"projection_dim": 320},
        "the text projection must match the EfficientNet tower's pooled width (320 at width_coefficient 1.0)",
    ),
    "aria": (
        {"projector_patch_to_query_dict": {64: 16}},
        "the projector maps the patch count to its query count by a table of the checkpoint image sizes "
        "(1225, 4900 patches); the tiny image has 64",
    ),
    "bridgetower_vision_model": (
        {"hidden_size": 64},
        "its residual attention blocks use d_model // 64 heads (a constant head width of 64)",
    ),
    "layoutlmv3": (
        {"hidden_size": 48, "coordinate_size": 8, "shape_size": 8},
        "the 2-D position embedding concatenates 4 coordinate + 2 shape embeddings: hidden = 4c + 2s",
    ),
    "recurrent_gemma": (
        {"num_hidden_layers": 3},
        "the layer kinds cycle through block_types (recurrent, recurrent, attention): 2 layers hold no attention",
    ),
    "reformer": (
        {"axial_pos_embds_dim": [16, 16], "axial_pos_shape": [8, 8]},
        "axial position embeddings: their dims must sum to the hidden size, their shape bounds the sequence",
    ),
    "clvp_encoder": (
        {"num_attention_heads": 1},
        "the rotary dim is max(projection_dim // (2 * heads), 32), a constant of the modeling code: one head of "
        "the tiny hidden size (32) is as wide as it",
    ),
    "efficientloftr": (
        {
            k: None
            for k in (
                "hidden_size",
                "intermediate_size",
                "num_attention_heads",
                "num_key_value_heads",
                "stage_num_blocks",
                "stage_in_channels",
                "out_features",
            )
        },
        "its backbone's channels are nested per-block lists (stage_block_in/out_channels, 14 blocks deep) that "
        "must match out_features, hidden_size and the rotary embedding's width: kept at the defaults (a few M "
        "parameters)",
    ),
    "xlstm": (
        {"hidden_size": 128, "embedding_dim": 128},
        "the config rounds the query/key and value widths (hidden x 0.5, hidden x 1.0) up to a multiple of 64 for "
        "the cache but the layers use them unrounded: 128 is the smallest hidden size where both agree",
    ),
    "bamba": (
        {"attn_layer_indices": [1]},
        "the defaults hold no attention layer (attn_layer_indices=None), which the model's cache cannot serve",
    ),
    "granitemoehybrid": (
        {"layer_types": ["linear_attention", "attention"]},
        "the defaults are all linear-attention (Mamba) layers, which the model's cache cannot serve",
    ),
    "jamba": (
        {
            "num_hidden_layers": 2,
            "attn_layer_period": 2,
            "attn_layer_offset": 1,
            "expert_layer_period": 2,
            "expert_layer_offset": 1,
        },
        "attention/expert layers are placed by period/offset (8/4, 2/1), so 2 layers would hold no attention layer",
    ),
}


#: model type -> why it cannot be built from a config alone (checked before building)
SKIPS: dict[str, str] = {
    "chameleon": "checkpoint-only component: the image-token vocabulary map (vocabulary_map) comes from the "
    "checkpoint's tokenizer; the default config has none",
    "emu3": "checkpoint-only component: the image-token vocabulary map (vocabulary_map) comes from the "
    "checkpoint's tokenizer; the default config has none",
    "sam2_video": "stateful video tracking: its forward takes an inference_session object (frames, prompts and "
    "memories kept across calls), not tensors; the image model (sam2) and its vision tower are covered",
    "edgetam_video": "stateful video tracking: its forward takes an inference_session object (frames, prompts and "
    "memories kept across calls), not tensors; the image model (edgetam) and its vision tower are covered",
    "gemma4_assistant": "not constructible in transformers 5.23: the config makes every layer share the target "
    "model's keys/values, which the text config's kv_sharing_modes refuses; its forward also needs the target "
    "model's shared_kv_states (a draft model of assisted generation)",
    "gemma4_unified_assistant": "not constructible in transformers 5.23 (see gemma4_assistant: every layer "
    "shares the target model's keys/values, which kv_sharing_modes refuses)",
}


@dataclass
class Arch:
    """One enumerated model type: the head it is exported with and, if it cannot run here, why."""

    model_type: str
    head: str
    model_class: str
    skip: str | None = None


@dataclass
class Case:
    """A built architecture: the model, the inputs to export with, other inputs, notes on how they were found."""

    name: str
    model: Any
    sample: dict[str, Any]
    other: dict[str, Any]
    head: str = ""
    notes: list[str] = field(default_factory=list)


class BuildSkip(Exception):
    """The architecture cannot be built in this environment (its reason is a skip, not a failure)."""


# ---- enumeration ---------------------------------------------------------------------------------------------
#: main input names :func:`build_case` knows how to build
MAIN_INPUTS = (
    "input_ids",
    "pixel_values",
    "input_features",
    "input_values",
    "inputs",
    "past_values",
    "states",
    "pixel_values_videos",
)


def _heads() -> list[tuple[str, dict[str, Any]]]:
    from transformers.models.auto import modeling_auto

    return [(head, getattr(modeling_auto, name)) for head, name in HEADS]


def arch_of(model_type: str, mappings: list[tuple[str, dict[str, Any]]] | None = None) -> Arch:
    """The head, model class and skip reason of one model type (imports only its own model class)."""
    import torch
    import transformers

    mappings = mappings or _heads()
    head, names = next((h, m[model_type]) for h, m in mappings if model_type in m)
    class_name = names if isinstance(names, str) else names[0]
    arch = Arch(model_type, head, class_name)
    try:
        model_cls = getattr(transformers, class_name)
        main = getattr(model_cls, "main_input_name", "input_ids")
    except (ImportError, AttributeError) as exc:
        arch.skip = skip_reason(exc) or f"{class_name} not importable: {_one_line(exc)}"
        return arch
    if model_type in SKIPS:
        arch.skip = SKIPS[model_type]
    elif getattr(model_cls, "forward", None) is torch.nn.Module.forward:
        arch.skip = f"{class_name} has no forward (generation-only wrapper)"
    elif head != "image-text-to-text" and main not in MAIN_INPUTS:
        arch.skip = f"main input {main!r} (no sample-input builder for it)"
    return arch


@functools.lru_cache(maxsize=1)
def enumerate_architectures() -> list[Arch]:
    """Every model type of the :data:`HEADS` mappings, sorted, with its head (first mapping holding it)."""
    mappings = _heads()
    types = sorted({t for _head, mapping in mappings for t in mapping})
    return [arch_of(model_type, mappings) for model_type in types]


def _one_line(exc: BaseException) -> str:
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    text = f"{type(exc).__name__}: {lines[0] if lines else ''}"
    return text if len(text) <= 200 else text[:197] + "..."


_PACKAGE = re.compile(r"(?:requires the |No module named |pip install )['\"`]?([A-Za-z0-9_\-]+)")


def skip_reason(exc: BaseException) -> str | None:
    """The skip reason of a build failure that is the environment's, not the shrinker's or the model's."""
    text = f"{type(exc).__name__}: {exc}"
    low = text.lower()
    if isinstance(exc, BuildSkip):
        return str(exc)
    if "huggingface.co" in low or "localentrynotfound" in low or "offline mode" in low or "hf_hub_offline" in low:
        return "checkpoint-only component: builds a sub-model from a Hub checkpoint (no network here)"
    if "trust_remote_code" in low or "remote code" in low:
        return "remote code"
    if isinstance(exc, (ImportError, ModuleNotFoundError)) or "requires the" in low or "pip install" in low:
        match = _PACKAGE.search(text)
        return f"needs a package not installed: {match.group(1) if match else _one_line(exc)}"
    if ("cuda" in low and ("kernel" in low or "not available" in low or "requires" in low)) or "flash_attn" in low:
        return f"GPU-only kernel: {_one_line(exc)}"
    return None


# ---- shrinking -----------------------------------------------------------------------------------------------
_LAYER_KEYS = (
    "num_hidden_layers",
    "num_layers",
    "n_layer",
    "n_layers",
    "encoder_layers",
    "decoder_layers",
    "num_decoder_layers",
    "num_encoder_layers",
    "depth",
    "layers",
    "num_blocks",
    "text_layers",
    "vision_layers",
)
_HIDDEN = re.compile(
    r"^(hidden_size|hidden_size_global|d_model|n_embd|embed_dim|model_dim|dim|hidden_dim_model|word_embed_proj_dim|"
    r"embedding_dim|"
    r"projection_dim|proj_dim|output_dim|out_hidden_size|text_hidden_size|vision_hidden_size|encoder_hidden_size|"
    r"decoder_hidden_size|projector_hidden_size|output_hidden_size|audio_hidden_size|llm_hidden_size|"
    r"hidden_size_per_layer_input|memory_dim|latent_dim|d_inner_hidden|n_embed|vision_embed_dim|text_embed_dim|"
    r"classifier_proj_size|pooler_output_size|fpn_hidden_size|mlp_hidden_size|encoder_hidden_dim|"
    r"downsample_hidden_size|vision_output_dim|text_config_hidden_size|d_embed|qformer_hidden_size|"
    r"multimodal_projector_hidden_size|adaptor_hidden_size|lm_hidden_size|feature_size_out|"
    r".*_hidden_size)$"
)
_FFN = re.compile(
    r"^(intermediate_size|ffn_dim|d_ff|dim_ff|n_inner|mlp_dim|linear_units|encoder_ffn_dim|decoder_ffn_dim|ffn_hidden_size|"
    r"hidden_dim|decoder_intermediate_size|encoder_intermediate_size|dim_feedforward|encoder_ffn_size|"
    r"vision_intermediate_size|text_intermediate_size|.*_intermediate_size|.*_ffn_dim|inner_dim|d_inner|"
    r"feed_forward_size|feedforward_dim|mlp_hidden_dim|projector_intermediate_size)$"
)
_MOE_FFN = re.compile(
    r"^(moe_intermediate_size|shared_expert_intermediate_size|expert_intermediate_size|"
    r"moe_ffn_hidden_size|shared_intermediate_size|moe_shared_expert_intermediate_size)$"
)
_HEADS = re.compile(
    r"^(num_attention_heads|num_heads|n_head|n_heads|attention_heads|encoder_attention_heads|"
    r"decoder_attention_heads|encoder_num_attention_heads|decoder_num_attention_heads|num_attention_head|"
    r"swa_num_attention_heads|vision_num_attention_heads|text_num_attention_heads|.*_num_attention_heads|"
    r"nheads|num_q_heads|num_query_heads|index_n_heads|linear_num_value_heads|linear_num_heads|"
    r"mamba_n_heads|heads)$"
)
_KV_HEADS = re.compile(
    r"^(num_key_value_heads|num_kv_heads|n_kv_heads|n_head_kv|multi_query_group_num|kv_heads|num_kv|"
    r"swa_num_key_value_heads|linear_num_key_heads|.*_num_key_value_heads|num_key_value_groups)$"
)
_HEAD_DIM = re.compile(
    r"^(head_dim|d_kv|attention_head_dim|dim_head|head_size|kv_channels|qk_nope_head_dim|v_head_dim|"
    r"linear_key_head_dim|linear_value_head_dim|linear_head_dim|index_head_dim|swa_head_dim|mamba_d_head|"
    r"mamba_head_dim|attention_head_size|.*_head_dim)$"
)
_VOCAB = re.compile(r"^(.*vocab_size|num_embeddings|codebook_size|n_vocab|num_tokens|vocab_size_per_layer_input)$")
_POSITIONS = re.compile(
    r"^(max_position_embeddings|n_positions|max_target_positions|n_ctx|max_seq_len|max_sequence_length|"
    r"max_2d_position_embeddings|seq_length|context_length|max_length|text_max_position_embeddings|"
    r"max_text_position_embeddings|max_seq_length)$"
)
_EXPERTS = re.compile(
    r"^(num_experts|num_local_experts|n_routed_experts|moe_num_experts|num_routed_experts|n_experts|"
    r"num_experts_per_layer|expert_num|num_moe_experts)$"
)
_TOP_K = re.compile(
    r"^(num_experts_per_tok|moe_topk|top_k_experts|num_selected_experts|moe_k|top_k|topk|"
    r"num_experts_per_token|n_activated_experts|experts_per_token|moe_top_k)$"
)
_RANK = re.compile(r"^(q_lora_rank|kv_lora_rank|time_step_rank|o_lora_rank|lora_rank|.*_lora_rank)$")
_IMAGE = re.compile(r"^(image_size|img_size|pretrain_image_size|vision_image_size|input_size_image)$")
_PATCH = re.compile(r"^(patch_size|vision_patch_size|model_patch_size)$")
_WINDOW = re.compile(
    r"^(window_size|sliding_window|attention_window|local_attention|attention_chunk_size|"
    r"sliding_window_size|chunk_size_attention|local_window_size|block_size)$"
)
_MEL = re.compile(r"^(num_mel_bins|input_feat_per_channel|n_mels|num_mel_filters|mel_bins)$")
_SPECIAL = re.compile(r"^(.*_token_id|.*_token_index|.*_token_ids|.*_token|.*_id)$")
_STAGE_SIZES = re.compile(
    r"^(hidden_sizes|embed_dims?|embed_dim_per_stage|dims|channels|hidden_dims|widths|"
    r"neck_hidden_sizes|conv_dim|stage_out_channels|stage_mid_channels|stage_in_channels|"
    r"encoder_in_channels|out_channels|in_channels|decoder_in_channels|encoder_hidden_sizes|"
    r"backbone_channel_list|num_channels_per_stage|block_channels|stem_channels)$"
)
_STAGE_DEPTHS = re.compile(
    r"^(depths|stage_num_blocks|blocks_per_stage|num_layers_per_stage|layers_per_stage|"
    r"stage_numb_of_layers|num_blocks_per_stage|depth_per_stage)$"
)
_STAGE_HEADS = re.compile(
    r"^(num_heads|num_attention_heads|num_attention_heads_per_stage|heads|num_heads_per_stage|"
    r"attention_heads)$"
)
_NO_SHRINK = {"num_labels", "num_channels", "type_vocab_size", "pad_token_id", "bos_token_id", "eos_token_id"}


def _int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _round8(value: float) -> int:
    return max(8, int(round(value / 8.0)) * 8)


def _layer_count_keys(d: dict[str, Any]) -> dict[str, int]:
    return {k: d[k] for k in _LAYER_KEYS if _int(d.get(k)) and d[k] > 0}


def _per_layer_keys(d: dict[str, Any], n: int) -> list[str]:
    """Keys holding one entry per layer (type lists, per-layer sizes or flags, hybrid patterns) of ``n`` layers."""
    keys = []
    for k, v in d.items():
        if not isinstance(k, str) or k in _LAYER_KEYS or _STAGE_DEPTHS.match(k) or _STAGE_SIZES.match(k):
            continue
        if _STAGE_HEADS.match(k) or k in ("out_features", "out_indices", "stage_names"):
            continue
        if isinstance(v, (list, str)) and len(v) == n and n > 2:
            if isinstance(v, str) and not re.fullmatch(r"[A-Za-z\-\*]+", v):
                continue
            keys.append(k)
    return keys


_INDEX_LIST = re.compile(r"(index|indexes|indices|idxs|_layers|_layer_ids|_layer_idx)$")


def _index_keys(d: dict[str, Any], n: int, per_layer: list[str]) -> list[str]:
    """Keys listing layer indices (global-attention layers, dense layers, deepstack taps...)."""
    return [
        k
        for k, v in d.items()
        if isinstance(k, str)
        and k not in per_layer
        and isinstance(v, list)
        and v
        and all(_int(x) and 0 <= x < n for x in v)
        and _INDEX_LIST.search(k)
    ]


def _layer_dict_keys(d: dict[str, Any]) -> list[str]:
    """Keys of dicts keyed by layer index (per-layer config overrides)."""
    return [
        k
        for k, v in d.items()
        if isinstance(k, str)
        and "layer" in k
        and isinstance(v, dict)
        and v
        and all(str(x).lstrip("-").isdigit() for x in v)
    ]


def _keep_indices(
    d: dict[str, Any], n: int, per_layer: list[str], index: list[str], layer_dicts: list[str]
) -> list[int]:
    """The layers to keep: the first layer of every distinct value of every per-layer key (and of membership in
    every layer-index list / per-layer dict), so each layer kind survives; at least 2, else the first layers."""
    columns = [[repr(d[k][i]) for i in range(n)] for k in per_layer]
    columns += [[i in set(d[k]) for i in range(n)] for k in index]
    columns += [[i in {int(x) for x in d[k]} for i in range(n)] for k in layer_dicts]
    keep: set[int] = set()
    for column in columns:
        firsts: dict[Any, int] = {}
        for i, value in enumerate(column):
            firsts.setdefault(value, i)
        keep |= set(firsts.values())
    i = 0
    while len(keep) < min(2, n):
        keep.add(i)
        i += 1
    return sorted(keep)[: max(MAX_LAYERS, 2)] if len(keep) > 2 * MAX_LAYERS else sorted(keep)


def _shrink_layers(d: dict[str, Any]) -> dict[int, int]:
    """Shrink the layer counts of one config level; return old index -> new index of the kept layers."""
    counts = _layer_count_keys(d)
    mapping: dict[int, int] = {}
    for key, n in counts.items():
        if n <= 2:
            continue
        per_layer = _per_layer_keys(d, n)
        index = _index_keys(d, n, per_layer)
        layer_dicts = _layer_dict_keys(d)
        keep = _keep_indices(d, n, per_layer, index, layer_dicts)
        old_to_new = {old: new for new, old in enumerate(keep)}
        for k in per_layer:
            value = d[k]
            picked = [value[i] for i in keep]
            if isinstance(value, str):
                d[k] = "".join(picked)
            else:
                d[k] = [_shrink_value(k, x, d) if _int(x) else x for x in picked]
        for k in index:
            d[k] = sorted({old_to_new[x] for x in d[k] if x in old_to_new}) or [len(keep) - 1]
        for k in layer_dicts:
            d[k] = {type(x)(old_to_new[int(x)]): v for x, v in d[k].items() if int(x) in old_to_new}
        d[key] = len(keep)
        mapping.update(old_to_new)
        if "stage_names" in d or "out_indices" in d or "out_features" in d:
            _fix_stages(d, len(keep))
        if _int(d.get("num_kv_shared_layers")) and d["num_kv_shared_layers"] > 0:  # the same share of the stack
            d["num_kv_shared_layers"] = d["num_kv_shared_layers"] * len(keep) // n
        for k in (
            "max_window_layers",
            "first_k_dense_replace",
            "moe_layer_start_index",
            "num_dense_layers",
            "first_dense_layers",
            "full_attn_start_layer",
        ):
            if _int(d.get(k)) and d[k] > 0:
                d[k] = min(d[k], max(0, len(keep) - 1)) if k != "max_window_layers" else min(d[k], len(keep))
        if _int(d.get("num_nextn_predict_layers")):
            d["num_nextn_predict_layers"] = 0
    return mapping


def _fix_stages(d: dict[str, Any], layers: int) -> None:
    """Backbone outputs of a ViT-like stack whose layers are its stages: stage names, out indices/features."""
    d["stage_names"] = ["stem"] + [f"stage{i}" for i in range(1, layers + 1)]
    old = d.get("out_indices")
    if isinstance(old, list) and old:
        new = sorted({min(max(0, x), layers) if x >= 0 else layers + 1 + x for x in old})
        d["out_indices"] = new
        d["out_features"] = [d["stage_names"][i] for i in new]
    elif isinstance(d.get("out_features"), list):
        d["out_features"] = [d["stage_names"][-1]]
        if "out_indices" in d:
            d["out_indices"] = [layers]


def _channels(value: int) -> int:
    """A channel count divided by 8 in multiples of 32 (GroupNorm(32) is common), at least 32: equal counts stay
    equal, so the in/out channels of consecutive stages still match."""
    return max(32, 32 * round(value / 256)) if value > 8 else value


def _shrink_value(k: str, v: Any, d: dict[str, Any]) -> Any:
    """The shrunk value of one field (``d``: the already-shrunk level, for relations)."""
    if _int(v):
        if k in _NO_SHRINK:
            return v
        if _MOE_FFN.match(k):
            return min(v, MOE_FFN) if v > 0 else v
        if _FFN.match(k):
            return min(v, FFN) if v > 0 else v
        if k in ("qk_rope_head_dim", "rotary_dim", "rope_dim"):
            return min(v, 4) if v > 0 else v
        if _HEAD_DIM.match(k):
            return min(v, HEAD_DIM) if v > 0 else v
        if _RANK.match(k):
            return min(v, 16) if v > 0 else v
        if _KV_HEADS.match(k):
            return v  # fixed up with the heads below
        if _HEADS.match(k):
            return min(v, HEADS_N)
        if _HIDDEN.match(k):
            return min(v, HIDDEN) if v > 0 else v
        if _VOCAB.match(k):
            return min(v, VOCAB) if v > 0 else v
        if _POSITIONS.match(k):
            return min(v, POSITIONS) if v > 0 else v
        if k == "max_source_positions":
            return min(v, 64)
        if _EXPERTS.match(k):
            return min(v, EXPERTS) if v > 0 else v
        if _TOP_K.match(k):
            return min(v, TOP_K) if v > 0 else v
        if _IMAGE.match(k):
            return min(v, IMAGE)
        if _PATCH.match(k):
            return min(v, PATCH) if v > 0 else v
        if _WINDOW.match(k):
            return min(v, 4) if v > 0 else v
        if _MEL.match(k):
            return min(v, 16) if v > 0 else v
        if k in ("n_group", "topk_group", "num_expert_group", "n_groups_routed"):
            return 1
        if k in ("num_groups", "norm_num_groups", "resnet_groups", "group_norm_groups", "num_norm_groups"):
            return min(v, 2)  # GroupNorm groups must divide the shrunk channels
        if k in ("num_conv_pos_embeddings",):
            return min(v, 16)
        if k in ("num_conv_pos_embedding_groups",):
            return min(v, 2)
        if k in ("mm_tokens_per_image",):
            return min(v, 16)  # a square that divides the (image / patch)^2 = 64 patches: pooled 2x2
        if k in ("num_queries",):  # detection queries: a top-k over the (few) tiny anchors
            return min(v, 10)
        if k in (
            "num_query_tokens",
            "num_latents",
            "image_seq_length",
            "num_image_tokens",
            "num_patches",
            "num_position_embeddings",
            "num_register_tokens",
        ):
            return v  # fixed up from the image size below (or by the model's own mismatch error)
        if k in ("index_topk",):
            return min(v, 4)
        if k in ("num_frames",):
            return min(v, 4)
        if k in ("intra_bottleneck_size", "true_hidden_size"):
            return min(v, HIDDEN)
        if k in ("feature_size", "embedding_size"):  # audio feature sizes, pixel-decoder widths, embedding widths
            return min(v, 32)
        if k in ("base_channels", "ch", "block_out_channels_base"):
            return min(v, 32)  # VAE-style blocks use GroupNorm(32) on multiples of it
        if k in (
            "conv_channels",
            "num_filters",
            "hidden_channels",
            "embedding_channels",
            "upsample_initial_channel",
            "vector_quantization_hidden_dimension",
            "mask_downsampler_embed_dim",
            "memory_attention_hidden_size",
            "memory_encoder_hidden_size",
            "memory_fuser_embed_dim",
            "encoder_output_dim",
            "subsampling_conv_channels",
            "conv_dim",
            "tdnn_out",
            "xvector_output_dim",
            "adapter_dim",
            "prompt_dim",
        ):
            return min(v, 16) if v > 0 else v
        if k in ("time_step_rank",):
            return min(v, 8)
        if k in ("state_size", "mamba_d_state", "ssm_state_size", "d_state"):
            return min(v, 8)
        if k in ("chunk_size", "mamba_chunk_size", "ssm_chunk_size") and v > 0:
            return min(v, 16)
        return v
    if isinstance(v, list) and v and all(_int(x) for x in v):
        if _STAGE_DEPTHS.match(k):
            return [min(1, x) if x else 0 for x in v]
        if _STAGE_HEADS.match(k):
            first = v[0] or 1
            return [min(2, max(1, x // first)) if x else x for x in v]  # divides every shrunk stage width
        if _STAGE_SIZES.match(k):
            return [_channels(x) if x > 0 else x for x in v]
        if k in ("tdnn_dim",):
            return [min(x, 16) for x in v]
        if _IMAGE.match(k):  # (height, width): the aspect ratio kept
            scale = min(1.0, IMAGE / max(max(v), 1))
            return [max(PATCH, int(x * scale)) for x in v]
        if _PATCH.match(k):
            return [min(x, PATCH) for x in v]
        if _WINDOW.match(k):
            return [min(x, 4) for x in v]
    return v


def _fix_heads(d: dict[str, Any], original: dict[str, Any]) -> None:
    """Key/value heads: as many as the heads when the original had as many (MHA), one when one (MQA), else 2.
    A head_dim / key-value head count the defaults leave unset (the checkpoints set it) is set."""
    heads_key = next((k for k in d if isinstance(k, str) and _HEADS.match(k) and _int(d[k])), None)
    heads = d[heads_key] if heads_key else HEADS_N
    if heads_key == "num_attention_heads" and _int(d.get("hidden_size")):
        if "head_dim" in d and d["head_dim"] is None:
            d["head_dim"] = d["hidden_size"] // heads
        if "num_key_value_heads" in d and d["num_key_value_heads"] is None:
            d["num_key_value_heads"] = heads
    for k, v in list(d.items()):
        if not isinstance(k, str) or not _KV_HEADS.match(k) or not _int(v) or v <= 0:
            continue
        orig_heads = original.get(heads_key) if heads_key else None
        if k == "num_key_value_groups":
            continue
        if orig_heads is not None and v == orig_heads:
            d[k] = heads
        elif v == 1:
            d[k] = 1
        else:
            d[k] = min(KV_HEADS, heads)
    if "linear_num_key_heads" in d and "linear_num_value_heads" in d:
        d["linear_num_key_heads"], d["linear_num_value_heads"] = 2, 4
    hidden = d.get("hidden_size") if _int(d.get("hidden_size")) else None
    if hidden and heads_key and _int(d.get("head_dim")) and d["head_dim"] * d[heads_key] != hidden:
        pass  # an explicit head_dim independent of hidden (Gemma, Qwen3...): kept at HEAD_DIM
    if hidden and heads_key and hidden % max(1, d[heads_key]):
        d[heads_key] = math.gcd(hidden, d[heads_key])


def _keep_relations(d: dict[str, Any], original: dict[str, Any], untouched: list[str]) -> None:
    """A size no rule knows that equalled the hidden size / head dim / intermediate size stays equal to it
    (e.g. BROS's bbox projection = head dim)."""
    heads = original.get("num_attention_heads")
    old_hidden, new_hidden = original.get("hidden_size"), d.get("hidden_size")
    pairs = []
    if _int(old_hidden) and _int(new_hidden):
        pairs.append((old_hidden, new_hidden))
        if _int(heads) and heads and _int(d.get("num_attention_heads")) and d["num_attention_heads"]:
            pairs.append((old_hidden // heads, new_hidden // d["num_attention_heads"]))
    if _int(original.get("intermediate_size")) and _int(d.get("intermediate_size")):
        pairs.append((original["intermediate_size"], d["intermediate_size"]))
    for k in untouched:
        for old, new in pairs:
            if original.get(k) == old and old != new and not k.endswith(("_id", "_index", "positions", "length")):
                d[k] = new
                break


def _fix_feature_layers(d: dict[str, Any]) -> None:
    """Layer indices into the (shrunk) vision tower stay inside it (LLaVA's vision_feature_layer, VipLLaVA's list)."""
    vision = d.get("vision_config")
    layers = next((vision[k] for k in _LAYER_KEYS if isinstance(vision, dict) and _int(vision.get(k))), None)
    if not layers:
        return

    def clamp(x: int) -> int:
        return max(x, -layers) if x < 0 else min(x, layers - 1)

    for k in ("vision_feature_layer", "vision_feature_layers"):
        if _int(d.get(k)):
            d[k] = clamp(d[k])
        elif isinstance(d.get(k), list) and all(_int(x) for x in d[k]):
            d[k] = [clamp(x) for x in d[k]]


def _fix_windows(d: dict[str, Any], original: dict[str, Any]) -> None:
    """Windows measured in patches scale with the patch grid (Swin: the last stage is one window), windows in
    pixels with the patch size (Qwen2.5-VL); LLaVA-NeXT's resolution grid with the image size."""
    image, patch = original.get("image_size"), original.get("patch_size")
    for k in ("window_size",):
        old = original.get(k)
        if not _int(old) or old <= 0:
            continue
        if _int(image) and _int(patch) and _int(d.get("image_size")) and _int(d.get("patch_size")):
            old_grid, new_grid = image // patch, d["image_size"] // d["patch_size"]
            d[k] = max(1, round(old * new_grid / max(1, old_grid)))
        elif _int(patch) and old >= patch and _int(d.get("patch_size")):
            d[k] = old * d["patch_size"] // patch
    pinpoints = original.get("image_grid_pinpoints")
    vision = original.get("vision_config") if isinstance(original.get("vision_config"), dict) else {}
    old_size = vision.get("image_size") or original.get("image_size")
    new_vision = d.get("vision_config") if isinstance(d.get("vision_config"), dict) else {}
    new_size = new_vision.get("image_size") or d.get("image_size")
    if isinstance(pinpoints, list) and _int(old_size) and _int(new_size) and old_size:
        d["image_grid_pinpoints"] = [[x * new_size // old_size for x in pair] for pair in pinpoints]


def _fix_rope(d: dict[str, Any]) -> None:
    """M-RoPE sections must sum to half the (shrunk) rotary head dim."""
    for holder in (d.get("rope_parameters"), d.get("rope_scaling"), d):
        if not isinstance(holder, dict) or not isinstance(holder.get("mrope_section"), list):
            continue
        head_dim = d.get("head_dim") if _int(d.get("head_dim")) else HIDDEN // max(1, d.get("num_attention_heads", 4))
        factor = holder.get("partial_rotary_factor", d.get("partial_rotary_factor", 1.0)) or 1.0
        half = max(len(holder["mrope_section"]), int(head_dim * factor) // 2)
        section = holder["mrope_section"]
        total = sum(section) or 1
        new = [max(1, int(x * half / total)) for x in section]
        new[0] += half - sum(new)
        holder["mrope_section"] = new


def _is_sub_config(k: str, v: Any) -> bool:
    return isinstance(v, dict) and ("model_type" in v or k.endswith("_config") or k in ("encoder", "decoder"))


def _shrink(d: dict[str, Any], keep_layers: bool = False) -> dict[str, Any]:
    original = copy.deepcopy(d)
    out = dict(d)
    for k, v in d.items():
        if not isinstance(k, str) or k in ("id2label", "label2id"):
            continue
        if "layer" in k and isinstance(v, dict) and v and all(str(x).lstrip("-").isdigit() for x in v):  # per layer
            out[k] = {x: _shrink(y, keep_layers) if isinstance(y, dict) else y for x, y in v.items()}
        elif _is_sub_config(k, v):
            out[k] = _shrink(v, keep_layers)
        elif isinstance(v, list) and v and all(_is_sub_config(k, x) for x in v):
            out[k] = [_shrink(x, keep_layers) for x in v]
    if not keep_layers:
        _shrink_layers(out)
    untouched = []
    for k, v in list(out.items()):
        if not isinstance(k, str) or k in _LAYER_KEYS or _is_sub_config(k, v):
            continue
        out[k] = _shrink_value(k, v, out)
        if _int(v) and out[k] == v and v >= 16 and not _KV_HEADS.match(k):  # kv heads: _fix_heads owns them
            untouched.append(k)
    _keep_relations(out, original, untouched)
    _fix_heads(out, original)
    _fix_rope(out)
    _fix_windows(out, original)
    _fix_feature_layers(out)
    experts = [v for k, v in out.items() if isinstance(k, str) and _EXPERTS.match(k) and _int(v) and v > 1]
    top_k = [v for k, v in out.items() if isinstance(k, str) and _TOP_K.match(k) and _int(v) and v > 0]
    if experts or top_k or "moe_intermediate_size" in out:  # expert counts / top-k the checkpoint sets
        for k in list(out):
            if isinstance(k, str) and out[k] is None and _EXPERTS.match(k):
                out[k] = experts[0] if experts else EXPERTS
            elif isinstance(k, str) and (k == "num_experts_per_tok" or _TOP_K.match(k)) and out[k] is None:
                out[k] = TOP_K
            elif isinstance(k, str) and _MOE_FFN.match(k) and out[k] is None and k == "moe_intermediate_size":
                out[k] = MOE_FFN
            elif k in ("n_shared_experts", "num_shared_experts") and out[k] is None:
                out[k] = 1
    if "prediction_length" in out and out["prediction_length"] is None:  # time series: set by the checkpoint
        out["prediction_length"] = 4
    layers = out.get("num_hidden_layers")
    if "mlp_layer_types" in out and out["mlp_layer_types"] is None and _int(layers) and layers > 0:
        out["mlp_layer_types"] = ["dense"] + ["sparse"] * (layers - 1)  # the checkpoint sets it: both kinds
    # sizes whose relation the model checks
    if _int(out.get("qk_nope_head_dim")) and _int(out.get("qk_rope_head_dim")):  # MLA: sums stay sums
        old_sum = original["qk_nope_head_dim"] + original["qk_rope_head_dim"]
        for k, v in original.items():
            if not isinstance(k, str) or not k.endswith("head_dim") or k in ("qk_nope_head_dim", "qk_rope_head_dim"):
                continue
            if v == old_sum:
                out[k] = out["qk_nope_head_dim"] + out["qk_rope_head_dim"]
            elif v == original["qk_rope_head_dim"]:  # the rotary head dim (DeepSeek-V3's head_dim)
                out[k] = out["qk_rope_head_dim"]
    for k in ("mamba_n_heads", "mamba_num_heads"):
        if _int(out.get(k)) and _int(out.get("mamba_d_head")):
            expand = out.get("mamba_expand", 2) or 2
            out[k] = max(1, expand * out.get("hidden_size", HIDDEN) // out["mamba_d_head"])
    if out.get("model_type") in ("mamba2",) or ("expand" in out and "head_dim" in out and "n_groups" in out):
        if _int(out.get("num_heads")) and _int(out.get("head_dim")):
            out["num_heads"] = max(1, (out.get("expand", 2) or 2) * out.get("hidden_size", HIDDEN) // out["head_dim"])
    overrides, _why = OVERRIDES.get(str(out.get("model_type")), ({}, ""))
    for key, value in overrides.items():
        out[key] = original.get(key) if value is None else value  # None: keep the default
    if "vocab_size" in out and out["vocab_size"] is None and "hidden_size" in out:  # set by the checkpoint
        out["vocab_size"] = VOCAB
    if "use_pretrained_backbone" in out:
        out["use_pretrained_backbone"] = False
    if out.get("use_timm_backbone"):
        out["use_timm_backbone"] = False  # timm is not installed: the transformers backbone of the same config
    for k in ("mask_time_prob", "mask_feature_prob", "layerdrop", "encoder_layerdrop", "decoder_layerdrop"):
        if isinstance(out.get(k), (int, float)) and not isinstance(out.get(k), bool) and out[k] > 0:
            out[k] = 0.0
    return out


def _special_ids(d: dict[str, Any], found: set[int]) -> None:
    for k, v in d.items():
        if not isinstance(k, str) or k in ("id2label", "label2id"):
            continue
        if isinstance(v, dict):
            _special_ids(v, found)
        elif _SPECIAL.match(k) and k not in ("model_type",):
            for x in v if isinstance(v, list) else [v]:
                if _int(x) and x >= 0:
                    found.add(x)


def _remap_ids(d: dict[str, Any], mapping: dict[int, int]) -> None:
    for k, v in list(d.items()):
        if not isinstance(k, str) or k in ("id2label", "label2id"):
            continue
        if isinstance(v, dict):
            _remap_ids(v, mapping)
        elif _SPECIAL.match(k):
            if _int(v) and v in mapping:
                d[k] = mapping[v]
            elif isinstance(v, list):
                d[k] = [mapping.get(x, x) if _int(x) else x for x in v]


def _min_vocab(d: dict[str, Any], best: int = VOCAB) -> int:
    for k, v in d.items():
        if isinstance(v, dict) and k not in ("id2label", "label2id"):
            best = _min_vocab(v, best)
        elif k == "vocab_size" and _int(v) and v > 16:
            best = min(best, v)
    return best


def tiny_config(
    model_type: str, adjustments: list[Any] = (), config_cls: Any = None, notes: list[str] | None = None
) -> Any:
    """The config class's defaults with every recognised size field shrunk (plus :data:`OVERRIDES`, then the
    ``adjustments``: functions of the shrunk dict that :func:`build_case` derives from the model's own errors).
    ``config_cls``: the head's own config class where it is a sub-config of the type's (MusicGen's decoder).

    The result is validated by the config class's own validators; a refusal is read and fixed by rule, or the
    fields it names are backed off to their defaults (``_config_backoff.construct``; ``notes`` receives each fix).
    """
    from _config_backoff import construct
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    config_cls = config_cls or CONFIG_MAPPING[model_type]
    notes = notes if notes is not None else []
    default = _defaults(model_type, config_cls, notes)
    derived = _derived_layer_counts(config_cls, default)
    adjustments = [*derived, *adjustments]
    shrunk = _tiny_dict(default, adjustments)
    return construct(
        lambda d: config_cls.from_dict(copy.deepcopy(d)),
        shrunk,
        default=default,
        unshrunk=lambda: _tiny_dict(default, adjustments, keep_layers=True),
        notes=notes,
    )


def _defaults(model_type: str, config_cls: Any = None, notes: list[str] | None = None) -> dict[str, Any]:
    """The config class's defaults as a dict (towers the defaults leave out filled with their own defaults;
    defaults the class's own validators refuse fixed from the refusal)."""
    from _config_backoff import construct
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    config_cls = config_cls or CONFIG_MAPPING[model_type]
    try:
        default = config_cls().to_dict()
    except Exception:  # noqa: BLE001 - defaults the class's own validators refuse: fix them from the refusal
        subs = {}
        specs = getattr(config_cls, "sub_configs_defaults", {}) or {}
        for key, sub_cls in getattr(config_cls, "sub_configs", {}).items():
            spec = specs.get(key)
            if getattr(spec, "model_type", None) in CONFIG_MAPPING:  # an AutoConfig slot: its default type
                sub_cls = CONFIG_MAPPING[spec.model_type]
            try:
                subs[key] = sub_cls(**(getattr(spec, "init_kwargs", None) or {})).to_dict()
            except Exception:  # noqa: BLE001 - left to the class's own default
                pass
        default = construct(lambda kwargs: config_cls(**copy.deepcopy(kwargs)), subs, notes=notes, create=True)
        default = default.to_dict()
    for key, sub_cls in getattr(config_cls, "sub_configs", {}).items():  # a tower the defaults leave out
        if default.get(key) is None and isinstance(sub_cls, type) and hasattr(sub_cls, "model_type"):
            try:
                default[key] = sub_cls().to_dict()
            except Exception:  # noqa: BLE001 - a sub-config without usable defaults stays None
                pass
    return default


def _derived_layer_counts(config_cls: Any, default: dict[str, Any]) -> list[Any]:
    """Adjustments resetting the layer counts the class derives itself (a field defaulting to None that its
    ``__post_init__`` fills from the layer count, HRM's ``num_layers_per_stack``): None again, so the class derives
    them from the shrunk count instead of the shrunk count contradicting them."""
    import dataclasses

    try:
        fields = {f.name: f.default for f in dataclasses.fields(config_cls)}
    except TypeError:  # not a dataclass config
        return []
    keys = [
        k
        for k, v in default.items()
        if "layers" in k and k not in _LAYER_KEYS and _int(v) and k in fields and fields[k] is None
    ]

    def reset(d: dict[str, Any]) -> None:
        for k in keys:
            d[k] = None

    return [reset] if keys else []


def _tiny_dict(default: dict[str, Any], adjustments: list[Any] = (), keep_layers: bool = False) -> dict[str, Any]:
    """The shrunk dict of a config's defaults (see :func:`tiny_config`)."""
    shrunk = _shrink(copy.deepcopy(default), keep_layers)
    for adjust in adjustments:
        adjust(shrunk)
    for key in ("image_token_id", "image_token_index"):  # a placeholder id the checkpoint sets: a free id
        if key in shrunk and shrunk[key] is None:
            shrunk[key] = 10**6
    # special token ids beyond the shrunk vocab move to its top (the same id maps to the same new id everywhere)
    vocab = _min_vocab(shrunk)
    found: set[int] = set()
    _special_ids(shrunk, found)
    high = sorted(x for x in found if x >= vocab - 8)
    mapping = {old: vocab - 1 - i for i, old in enumerate(high)}
    _remap_ids(shrunk, mapping)
    for key in ("transformers_version", "architectures", "_name_or_path"):
        shrunk.pop(key, None)
    return shrunk


def special_token_ids(config: Any) -> set[int]:
    found: set[int] = set()
    _special_ids(config.to_dict(), found)
    return found


# ---- models and inputs ---------------------------------------------------------------------------------------
def _size(value: Any) -> tuple[int, int]:
    if isinstance(value, dict):
        return int(value.get("height", value.get("shortest_edge", IMAGE))), int(
            value.get("width", value.get("shortest_edge", IMAGE))
        )
    if isinstance(value, (list, tuple)):
        return (int(value[0]), int(value[-1])) if value else (IMAGE, IMAGE)
    return int(value), int(value)


def _params(model: Any) -> set[str]:
    return set(inspect.signature(model.forward).parameters)


def _required(model: Any) -> list[str]:
    """The forward's parameters without a default."""
    return [
        name
        for name, p in inspect.signature(model.forward).parameters.items()
        if p.default is p.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
    ]


class _Ids:
    """Random token ids that avoid the special ids (placeholders, bos/eos...) of the config."""

    def __init__(self, config: Any) -> None:
        text = config.get_text_config(decoder=True) if hasattr(config, "get_text_config") else config
        vocab = _get(text, "vocab_size", default=None) or _get(config, "vocab_size", default=VOCAB)
        self.vocab = int(vocab)
        specials = special_token_ids(config)
        self.allowed = [i for i in range(3, self.vocab) if i not in specials] or list(range(self.vocab))

    def __call__(self, batch: int, seq: int, seed: int) -> Any:
        import torch

        gen = torch.Generator().manual_seed(seed)
        pick = torch.randint(0, len(self.allowed), (batch, seq), generator=gen)
        return torch.tensor(self.allowed)[pick]


def _ones(batch: int, seq: int) -> Any:
    import torch

    return torch.ones(batch, seq, dtype=torch.int64)


def _text(model: Any, ids: _Ids, batch: int, seq: int, seed: int, pad_left: int = 0) -> dict[str, Any]:
    import torch

    params = _params(model)
    codebooks = _get(model.config, "num_codebooks", default=1)
    rows = batch * codebooks if _int(codebooks) and codebooks > 1 else batch  # MusicGen: one row per codebook
    inputs: dict[str, Any] = {"input_ids": ids(rows, seq, seed)}
    if "attention_mask" in params:
        mask = torch.ones(batch, seq, dtype=torch.int64)
        if pad_left:
            mask[0, :pad_left] = 0
        inputs["attention_mask"] = mask
    if "decoder_input_ids" in params and getattr(model.config, "is_encoder_decoder", False):
        inputs["decoder_input_ids"] = ids(batch, max(2, seq // 2 - 1), seed + 7)
    return inputs


def _image_inputs(model: Any, batch: int, seed: int) -> list[dict[str, Any]]:
    import torch

    config = model.config
    vision = _get(config, "vision_config", default=config)
    size = _size(_get(vision, "image_size", "img_size", default=_get(config, "image_size", default=IMAGE)))
    channels = _get(vision, "num_channels", "in_channels", default=3)
    channels = channels if _int(channels) else 3
    gen = torch.Generator().manual_seed(seed)
    layouts = [(batch, channels, *size)]
    if size != (IMAGE, IMAGE):
        layouts.append((batch, channels, IMAGE, IMAGE))
    frames = _get(vision, "num_frames", default=_get(config, "num_frames", default=None))
    if _int(frames):  # video: (batch, frames, channels, height, width)
        layouts.insert(0, (batch, frames, channels, *size))
    layouts.append((batch, 2, channels, *size))  # keypoint matchers: a pair of images per row
    layouts.append((batch, channels, size[0] // 2, size[1]))  # half the height: the model stacks a prompt on it
    return [{"pixel_values": torch.randn(*shape, generator=gen)} for shape in layouts]


def _audio_feature_inputs(model: Any, batch: int, frames: int, seed: int) -> list[dict[str, Any]]:
    import torch

    config = model.config
    names = ("feature_projection_input_dim", "num_mel_bins", "feature_size", "input_feat_per_channel", "n_mels")
    audio = _get(config, "audio_config", "encoder_config", default=config)
    if _get(audio, *names) is None:  # the mel size held by another tower (CLVP's decoder_config)
        subs = [v for v in vars(config).values() if hasattr(v, "to_dict") and _get(v, *names) is not None]
        audio = subs[0] if subs else audio
    mels = _get(audio, *names, default=16)
    for factor in ("input_channels", "num_stacked_frames"):  # channels; low-frame-rate stacking (mels x frames)
        times = _get(audio, factor, default=1)
        mels = mels * times if _int(times) and times > 1 else mels
    gen = torch.Generator().manual_seed(seed)
    candidates = []
    for shape in ((batch, mels, frames), (batch, frames, mels)):
        candidates.append({"input_features": torch.randn(*shape, generator=gen)})
    params = _params(model)
    masks = [n for n in ("attention_mask", "input_features_mask", "feature_attention_mask") if n in params]
    for mask in masks:  # some encoders need the frame mask
        for shape in ((batch, mels, frames), (batch, frames, mels)):
            features = torch.randn(*shape, generator=gen)
            candidates.append({"input_features": features, mask: torch.ones(batch, frames, dtype=torch.int64)})
    return candidates


def _waveform_inputs(model: Any, batch: int, samples: int, seed: int) -> list[dict[str, Any]]:
    import torch

    gen = torch.Generator().manual_seed(seed)
    candidates = [
        {"input_values": torch.randn(batch, samples, generator=gen)},
        {"input_values": torch.randn(batch, 1, samples, generator=gen)},
    ]
    mels = _get(model.config, "num_mel_bins", default=None)
    if _int(mels):  # spectrogram transformers: (batch, frames, mel bins), frames fixed by the config
        frames = _get(model.config, "max_length", default=64)
        candidates.append({"input_values": torch.randn(batch, frames, mels, generator=gen)})
    return candidates


def _decoder_inputs(model: Any, ids: _Ids, inputs: dict[str, Any], batch: int, dec: int, seed: int) -> None:
    params = _params(model)
    if "decoder_input_ids" in params and getattr(model.config, "is_encoder_decoder", False):
        inputs["decoder_input_ids"] = ids(batch, dec, seed + 7)


def _eager(model: Any, inputs: dict[str, Any]) -> Any:
    import torch

    with torch.no_grad():
        return model(**inputs)


def _first_running(model: Any, candidates: list[dict[str, Any]]) -> tuple[dict[str, Any] | None, BaseException | None]:
    error = None
    for inputs in candidates:
        try:
            _eager(model, inputs)
            return inputs, None
        except Exception as exc:  # noqa: BLE001 - the oracle: the next candidate
            error = error or exc
    return None, error


_MISMATCH = re.compile(r"tokens:?\s*(\d+),?\s*features:?\s*(\d+)", re.IGNORECASE)


def _grid_pixels(model: Any, batch: int, gen: Any, layout: int = 0) -> dict[str, Any]:
    """Qwen-VL-style images: flattened patches (rows = t*h*w per image, C*T*P*P each) and their (t, h, w) grid.
    ``layout`` 1: a temporal patch of 2 the config does not state; 2: patches as (C, P, P) images."""
    import torch

    vision = _get(model.config, "vision_config", default=model.config)
    patch = _get(vision, "patch_size", "spatial_patch_size", default=PATCH)
    temporal = _get(vision, "temporal_patch_size", default=2 if layout == 1 else 1)
    merge = _get(vision, "spatial_merge_size", "merge_size", default=2)
    channels = _get(vision, "in_channels", "in_chans", "num_channels", default=3)
    side = 2 * merge
    rows = batch * side * side
    if layout == 2:
        pixels = torch.randn(rows, channels, patch, patch, generator=gen)
    else:
        pixels = torch.randn(rows, channels * temporal * patch * patch, generator=gen)
    return {"pixel_values": pixels, "image_grid_thw": torch.tensor([[1, side, side]] * batch)}


def _patch_positions(model: Any, batch: int, gen: Any, name: str = "pixel_position_ids") -> dict[str, Any]:
    """Images as flattened patches (batch, patches, C*P*P) with their (x, y) grid positions under ``name``: a
    square grid whose side is twice the pooling kernel (Gemma 4 pools k x k patches into one soft token)."""
    import torch

    vision = _get(model.config, "vision_config", default=model.config)
    patch = _get(vision, "model_patch_size", "patch_size", default=PATCH)
    channels = _get(vision, "num_channels", default=3)
    side = 2 * (_get(vision, "pooling_kernel_size", default=1) or 1)
    ys, xs = torch.meshgrid(torch.arange(side), torch.arange(side), indexing="ij")
    grid = torch.stack([xs.flatten(), ys.flatten()], dim=-1)
    return {
        "pixel_values": torch.rand(batch, side * side, channels * patch * patch, generator=gen),
        name: grid.expand(batch, -1, -1).clone(),
    }


def _vlm_inputs(model: Any, ids: _Ids, batch: int, text: int, seed: int) -> tuple[dict[str, Any], BaseException | None]:
    """input_ids with image placeholders (between the vision start/end tokens where the config has them) +
    the images; the placeholder count is read from the model's mismatch error (tokens: N, features: M) when the
    first guess is wrong."""
    import torch

    config = model.config
    vision = _get(config, "vision_config", default=config)
    size = _size(_get(vision, "image_size", default=IMAGE))
    patch = _get(vision, "patch_size", default=PATCH)
    patch = patch if _int(patch) else PATCH
    params = _params(model)
    gen = torch.Generator().manual_seed(seed)
    inner = set(params)  # a head passing **kwargs on to its base model and encoder (DiffusionGemma)
    stack = [getattr(model, name, None) for name in ("model", "encoder")]
    while stack:
        module = stack.pop()
        if isinstance(module, torch.nn.Module):
            inner |= _params(module)
            stack += [getattr(module, name, None) for name in ("model", "encoder")]
    positions = next((n for n in ("image_position_ids", "pixel_position_ids") if n in inner), None)
    if "image_grid_thw" in params:
        image_sets = [_grid_pixels(model, batch, gen, layout) for layout in (0, 1, 2)]
        count = 4
    elif positions:  # Gemma 4: flattened patches and their (x, y) positions
        image_sets = [_patch_positions(model, batch, gen, positions)]
        count = 4
    else:
        channels = _get(vision, "num_channels", default=3)
        pixels = torch.randn(batch, channels if _int(channels) else 3, *size, generator=gen)
        image_sets = [{"pixel_values": pixels}, {"pixel_values": pixels[:, None]}]  # (B, C, H, W), (B, 1, C, H, W)
        high = _get(config, "high_res_vision_config", default=None)
        if "high_res_pixel_values" in params and high is not None:  # DeepSeek-VL hybrid: a second, larger view
            hsize = _size(_get(high, "image_size", default=2 * IMAGE))
            image_sets = [
                {**images, "high_res_pixel_values": torch.randn(batch, 3, *hsize, generator=gen)}
                for images in image_sets
            ]
        if "image_sizes" in params:  # LLaVA-NeXT / Pixtral towers need them; a CLIP tower refuses them
            sizes = torch.tensor([list(size)] * batch)
            image_sets += [{**images, "image_sizes": sizes} for images in image_sets]
        count = _get(config, "image_seq_length", "mm_tokens_per_image", "num_query_tokens", default=None) or (
            size[0] // patch
        ) * (size[1] // patch)
    first_error: BaseException | None = None
    for images in image_sets:
        inputs, error = _placeholders(model, ids, images, count, batch, text, seed)
        if error is None:
            return inputs, None
        first_error = first_error or error
        patches = re.search(r"got split_sizes=\[(\d+)", str(error))
        if patches and images["pixel_values"].dim() == 4:  # LLaVA-NeXT: (B, patches, C, H, W), patches per image
            tiles = images["pixel_values"][:, None].expand(-1, int(patches.group(1)), -1, -1, -1).contiguous()
            image_sets.append({**images, "pixel_values": tiles})
    return {}, first_error


def _placeholders(
    model: Any, ids: _Ids, images: dict[str, Any], count: int, batch: int, text: int, seed: int
) -> tuple[dict[str, Any], BaseException | None]:
    import torch

    config = model.config
    params = _params(model)
    token = _get(config, "image_token_id", "image_token_index", default=None)
    if token is None:  # no placeholders: the image features are prepended (BLIP-2's legacy path) or cross-attended
        inputs = {**_text(model, ids, batch, text, seed), **images}
        if "qformer_input_ids" in params:
            inputs["qformer_input_ids"] = ids(batch, 4, seed + 2)
            inputs["qformer_attention_mask"] = _ones(batch, 4)
        try:
            _eager(model, inputs)
            return inputs, None
        except Exception as exc:  # noqa: BLE001
            return {}, exc
    start = _get(config, "vision_start_token_id", "image_start_token_id", "boi_token_id", default=None)
    end = _get(config, "vision_end_token_id", "image_end_token_id", "eoi_token_id", default=None)
    error: BaseException | None = None
    hidden = _get(config.get_text_config(decoder=True), "hidden_size", default=HIDDEN)
    queue, tried = [count], set()
    while queue and len(tried) < 6:
        count = queue.pop(0)
        if count in tried or count <= 0:
            continue
        tried.add(count)
        parts = [ids(batch, 2, seed)]
        if _int(start):
            parts.append(torch.full((batch, 1), int(start)))
        parts.append(torch.full((batch, count), int(token)))
        if _int(end):
            parts.append(torch.full((batch, 1), int(end)))
        parts.append(ids(batch, text, seed + 1))
        input_ids = torch.cat(parts, dim=1)
        inputs: dict[str, Any] = {"input_ids": input_ids}
        if "attention_mask" in params:
            inputs["attention_mask"] = torch.ones_like(input_ids)
        inputs.update(images)
        if "qformer_input_ids" in params:  # InstructBLIP: the Q-Former's own prompt
            inputs["qformer_input_ids"] = ids(batch, 4, seed + 2)
            inputs["qformer_attention_mask"] = _ones(batch, 4)
        if "mm_token_type_ids" in params:  # M-RoPE: 1 marks an image token
            inputs["mm_token_type_ids"] = (input_ids == int(token)).long()
        try:
            _eager(model, inputs)
            return inputs, None
        except Exception as exc:  # noqa: BLE001
            error = exc
            match = _MISMATCH.search(str(exc))
            if match:  # the feature count is per batch, or of a flattened (rows x hidden) tensor
                features = int(match.group(2))
                for div in (batch, 1, batch * hidden, hidden):
                    if features % div == 0:
                        queue.append(features // div)
    return {}, error


def _image_like(name: str) -> bool:
    """A forward input shaped like the image (another view, a prompt image, a segmentation mask of it)."""
    return name.endswith("pixel_values") or name in ("prompt_masks", "pixel_masks", "prompt_pixel_values")


def _extras(model: Any, ids: _Ids, inputs: dict[str, Any], seed: int) -> dict[str, Any]:
    """``inputs`` plus the other modalities the forward takes (dual encoders: text + image; layout: boxes)."""
    import torch

    params = _params(model)
    first = next(iter(inputs.values()))
    batch = first.shape[0]
    out = dict(inputs)
    gen = torch.Generator().manual_seed(seed + 3)
    if "pixel_values" in params and "pixel_values" not in out:
        out.update(_image_inputs(model, batch, seed)[0])
    if "input_ids" in params and "input_ids" not in out:
        out.update(_text(model, ids, batch, 7, seed))
    if "pixel_values" in out:  # required images besides the main one (SegGPT's prompt image and its mask)
        for name in _required(model):
            if _image_like(name) and name not in out:
                out[name] = torch.randn(out["pixel_values"].shape, generator=gen)
    required = _required(model)
    if "input_values" in required and "input_values" not in out:  # audio-text dual encoders
        out["input_values"] = torch.randn(batch, 1, 4000, generator=gen)
    if "input_features" in params and "input_features" not in out:  # audio-text models (CLVP, speech LMs)
        out.update(_audio_feature_inputs(model, batch, 64, seed)[0])
    if "bbox" in params and "input_ids" in out:
        seq = out["input_ids"].shape[1]
        corners = torch.randint(0, 500, (batch, seq, 2), generator=gen)
        out["bbox"] = torch.cat([corners, corners + torch.randint(1, 500, (batch, seq, 2), generator=gen)], -1)
    return out


def _seeded_model(model_cls: Any, config: Any) -> Any:
    import torch

    torch.manual_seed(0)
    model = model_cls(config)
    languages = getattr(config, "languages", None)
    if hasattr(model, "set_default_language") and languages:  # X-MOD: the adapters of one language by default
        model.set_default_language(list(languages)[0])
    # every tiny model computes in float32 (precision is tested elsewhere): a default config or a buffer in
    # bfloat16 (RecurrentGemma's normalizer) would make the backends' dtype checks, not the export, the subject
    low = {t.dtype for t in [*model.parameters(), *model.buffers()] if t.is_floating_point()} - {torch.float32}
    if low:
        model = model.float()
        _set_dtype(model.config, torch.float32)
    return model.eval()


def _set_dtype(config: Any, dtype: Any) -> None:
    """Set ``dtype`` on a config and its sub-configs (what exporters read as the model's dtype)."""
    seen: set[int] = set()
    stack = [config]
    while stack:
        level = stack.pop()
        if id(level) in seen:
            continue
        seen.add(id(level))
        if hasattr(level, "dtype"):
            level.dtype = dtype
        stack += [v for v in vars(level).values() if hasattr(v, "to_dict") and hasattr(v, "model_type")]


_SPLIT_SUM = re.compile(r"split_sizes to sum exactly to (\d+)")


def _walk(d: dict[str, Any]) -> list[dict[str, Any]]:
    found = [d]
    for k, v in d.items():
        if isinstance(k, str) and isinstance(v, dict) and k not in ("id2label", "label2id"):
            found += _walk(v)
    return found


def _adjustment(exc: BaseException, default: dict[str, Any], notes: list[str] = ()) -> tuple[str, Any] | None:
    """A config fix read from the model's own error (a size the defaults hide in the modeling code);
    ``default``: the unshrunk defaults, for fixes that back a size off to its default; ``notes``: the fixes
    already applied (a back-off goes one step further each time)."""
    text = str(exc)
    match = _SPLIT_SUM.search(text)
    if match:  # M-RoPE sections default to [8, 12, 12] in the modeling code: split the shrunk rotary dim
        total = int(match.group(1))
        section = [total - 2 * (total // 3), total // 3, total // 3]

        def mrope(d: dict[str, Any]) -> None:
            for level in _walk(d):
                if isinstance(level.get("rope_parameters"), dict):
                    level["rope_parameters"]["mrope_section"] = section

        return f"mrope_section={section}", mrope
    if "got (NoneType)" in text and "ne()" in text:  # a pad token id the checkpoint sets, compared with the ids

        def pad(d: dict[str, Any]) -> None:
            for level in _walk(d):
                if "pad_token_id" in level and level["pad_token_id"] is None:
                    level["pad_token_id"] = 1

        return "pad_token_id=1", pad
    if re.search(r"rotates \d+ of head_dim=\d+ dims", text):  # partial rotary factor leaves too few dims

        def wider(d: dict[str, Any]) -> None:
            for level in _walk(d):
                if level.get("head_dim") == HEAD_DIM:
                    level["head_dim"] = 4 * HEAD_DIM

        return f"head_dim={4 * HEAD_DIM}", wider
    if "is not finite (the tiny random model" in text:  # activations vanished (or overflowed) through the stack

        def init(d: dict[str, Any]) -> None:
            for level in _walk(d):
                if isinstance(level.get("initializer_range"), float):
                    level["initializer_range"] *= 5

        return "initializer_range x5 (the random model's outputs were not finite)", init
    missing = _MISSING_ID.search(text)
    if missing:  # the modeling code reads a token id its config class does not declare (the checkpoint's does)
        name = missing.group(1)

        def token(d: dict[str, Any]) -> None:
            d[name] = _min_vocab(d) - 9 - len(name) % 4  # a free id near the top of the vocab

        return f"{name} set", token
    if _SIZE_MISMATCH.search(text):  # sizes tied in the modeling code: back off, the narrowest first
        for note, keep in _SIZE_BACKOFFS:
            if note not in notes:

                def restore(d: dict[str, Any], keep: Any = keep) -> None:
                    for level, orig in _paired_levels(d, default):
                        for k in list(level):
                            if isinstance(k, str) and k in orig and keep(k, orig[k]):
                                level[k] = copy.deepcopy(orig[k])

                return note, restore
    return None


def _is_size(k: str, v: Any) -> bool:
    """A width / head / channel size (not a layer count, layer list, vocab, position, image size or token id)."""
    if k in _LAYER_KEYS or k in _NO_SHRINK or _STAGE_DEPTHS.match(k) or _INDEX_LIST.search(k):
        return False
    if k.startswith("num_") and not (_HEADS.match(k) or _KV_HEADS.match(k)):  # counts (queries, labels...)
        return False
    if any(p.match(k) for p in (_VOCAB, _POSITIONS, _IMAGE, _SPECIAL, _EXPERTS, _TOP_K, _WINDOW, _MEL)):
        return False
    ints = v if isinstance(v, list) else [v]
    return bool(ints) and all(_int(x) for x in ints)


#: (note, which default keys to restore) after a size mismatch, tried in this order
_SIZE_BACKOFFS: list[tuple[str, Any]] = [
    ("patch sizes kept (the stem's stride is fixed in the modeling code)", lambda k, v: bool(_PATCH.match(k))),
    ("channel lists kept (the modeling code ties them)", lambda k, v: bool(_STAGE_SIZES.match(k))),
    ("widths kept, layers shrunk (the modeling code ties them)", _is_size),
]


_MISSING_ID = re.compile(r"object has no attribute '(\w+_token_id)'")
_SIZE_MISMATCH = re.compile(
    r"must match the size of tensor|is invalid for input of size|shapes cannot be multiplied|Sizes of tensors must match|"
    r"expected input with shape|to have \d+ channels"
)


def _paired_levels(d: dict[str, Any], orig: Any) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(level of ``d``, the same level of ``orig``) for every config level both hold."""
    if not isinstance(orig, dict):
        return []
    pairs = [(d, orig)]
    for k, v in d.items():
        if isinstance(v, dict) and k not in ("id2label", "label2id"):
            pairs += _paired_levels(v, orig.get(k))
    return pairs


def build_case(model_type: str, head: str | None = None) -> Case:
    """Build ``model_type`` tiny with random weights and find its sample and other inputs (eager as the oracle).

    A few sizes the config does not hold (M-RoPE sections written in the modeling code) are read from the
    model's own error and the build is retried with them.

    Raises:
        BuildSkip: The environment cannot build it (see :func:`skip_reason`).
        Exception: The tiny config or the inputs failed (the shrinker's fault, or the model's own).
    """
    import transformers

    arch = arch_of(model_type)
    if arch.skip:
        raise BuildSkip(arch.skip)
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    adjustments: list[Any] = []
    notes: list[str] = []
    model_cls = getattr(transformers, arch.model_class)
    own = getattr(model_cls, "config_class", None)
    subs = getattr(CONFIG_MAPPING[model_type], "sub_configs", {}).values()
    config_cls = own if own is not CONFIG_MAPPING[model_type] and own in subs else None
    while True:
        config_notes: list[str] = []
        try:
            config = tiny_config(model_type, adjustments, config_cls, notes=config_notes)
            model = _seeded_model(model_cls, config)
            case = Case(model_type, model, {}, {}, head=arch.head, notes=config_notes + notes)
            _find_inputs(case, _Ids(config))
            _check_finite(model, case.sample)
            _fixed_canvas(case, _Ids(config))
            return case
        except Exception as exc:
            reason = skip_reason(exc)
            if reason:
                raise BuildSkip(reason) from exc
            fix = _adjustment(exc, _defaults(model_type, config_cls), notes)
            if fix is None or fix[0] in notes or len(adjustments) >= 5:
                raise
            if fix[0].startswith("widths kept") and _parameters(model_cls, config_cls, model_type, adjustments, fix):
                raise  # the defaults' widths would not make a tiny model
            notes.append(fix[0])
            adjustments.append(fix[1])


#: the most parameters a model built with its default widths (layers shrunk) may have
MAX_PARAMETERS = 60_000_000


def _parameters(model_cls: Any, config_cls: Any, model_type: str, adjustments: list[Any], fix: Any) -> bool:
    """Whether the model with ``fix`` applied has more than :data:`MAX_PARAMETERS` (built on the meta device)."""
    import torch

    try:
        config = tiny_config(model_type, [*adjustments, fix[1]], config_cls)
        with torch.device("meta"):
            model = model_cls(config)
        return sum(p.numel() for p in model.parameters()) > MAX_PARAMETERS
    except Exception:  # noqa: BLE001 - the back-off does not even build: not worth trying
        return True


_BUILDABLE = {
    "self",
    "inputs",
    "qformer_input_ids",
    "input_ids",
    "pixel_values",
    "input_features",
    "input_values",
    "decoder_input_ids",
    "bbox",
    "grid_thw",
    "image_grid_thw",
    "hidden_states",
    "image_sizes",
    "pixel_position_ids",
    "image_position_ids",
}


def _find_inputs(case: Case, ids: _Ids) -> None:
    """Fill ``case.sample`` / ``case.other``: the first candidate inputs eager runs (the oracle)."""
    from _sample_inputs import special_inputs

    model, head = case.model, case.head
    main = getattr(model, "main_input_name", "input_ids")
    required = _required(model)
    special = special_inputs(model, _params(model), required, lambda b, n, s: _text(model, ids, b, n, s))
    if special is not None:
        case.sample, case.other, note = special
        for inputs in (case.sample, case.other):
            _eager(model, inputs)
        if note:
            case.notes.append(note)
        return
    unknown = [n for n in required if n not in _BUILDABLE and not n.endswith("_mask") and not _image_like(n)]
    if unknown:
        raise BuildSkip(
            f"forward requires {', '.join(map(repr, unknown))}, which the sample-input builder cannot build"
        )
    positions = next((n for n in ("pixel_position_ids", "image_position_ids") if n in required), None)
    if positions and head != "image-text-to-text":  # a Gemma-4-style vision tower alone: patches + positions
        import torch

        found = [
            _patch_positions(model, batch, torch.Generator().manual_seed(seed), positions)
            for batch, seed in ((2, 0), (3, 1))
        ]
        for inputs in found:
            _eager(model, inputs)
        case.sample, case.other = found
        return
    grid = next((n for n in ("grid_thw", "image_grid_thw") if n in required), None)
    if grid and head != "image-text-to-text":  # a Qwen-VL-style vision tower alone: patches + grid
        import torch

        name = next((n for n in required if n != grid), "pixel_values")
        error = None
        for layout in (0, 1, 2):
            found = []
            for batch, seed in ((2, 0), (3, 1)):
                images = _grid_pixels(model, batch, torch.Generator().manual_seed(seed), layout)
                found.append({name: images["pixel_values"], grid: images["image_grid_thw"]})
            try:
                for inputs in found:
                    _eager(model, inputs)
            except Exception as exc:  # noqa: BLE001 - the next layout
                error = error or exc
                continue
            case.sample, case.other = found
            return
        raise error
    if head == "image-text-to-text":
        sample, error = _vlm_inputs(model, ids, 2, 5, 0)
        if error is not None:
            raise error
        other, error = _vlm_inputs(model, ids, 3, 9, 1)
        if error is not None:
            case.notes.append("other: same text length (the model pinned it)")
            other, error2 = _vlm_inputs(model, ids, 3, 5, 1)
            if error2 is not None:
                raise error2
    elif main == "inputs" and head in ("masked-lm", "causal-lm", "sequence-classification", "token-classification"):
        sample = {"inputs": ids(2, 7, 0), "attention_mask": _ones(2, 7)}  # Perceiver: token ids under `inputs`
        other = {"inputs": ids(3, 11, 1), "attention_mask": _ones(3, 11)}
        for inputs in (sample, other):
            _eager(model, inputs)
    elif main == "input_ids":
        samples = [_text(model, ids, 2, seq, 0) for seq in (7, 8, 16, 32, 64)]
        sample, error = _first_running(model, samples)
        extra = sample is None
        if extra:
            sample, extra_error = _first_running(model, [_extras(model, ids, x, 0) for x in samples])
            error = extra_error if _extras(model, ids, samples[0], 0).keys() != samples[0].keys() else error
        no_cache = sample is None and ("use_cache" in _params(model) or hasattr(model.config, "use_cache"))
        if no_cache:  # a forward whose own cache cannot be built from its config (BLT): without a cache
            sample, no_cache_error = _first_running(model, [{**x, "use_cache": False} for x in samples])
            if sample is not None:
                case.notes.append("use_cache=False (the model's own cache fails)")
            elif "cache" in str(error).lower() or "num_hidden_layers" in str(error):
                error = no_cache_error  # past the cache: the next error is the one to read
        if sample is None:
            raise error
        seq = sample["input_ids"].shape[1]
        others = [_text(model, ids, 3, seq + step, 1, pad_left=2) for step in (4, seq)]
        others += [_text(model, ids, 3, seq + step, 1) for step in (4, seq)]
        others.append(_text(model, ids, 3, seq, 1))
        if extra:
            others = [_extras(model, ids, x, 1) for x in others]
        if "use_cache" in sample:
            others = [{**x, "use_cache": False} for x in others]
        other, error = _first_running(model, others)
        if other is None:
            raise error
        if "attention_mask" in other and int(other["attention_mask"].min()) == 1 and "attention_mask" in sample:
            case.notes.append("other: no left padding (the model refused a padded mask)")
        if other["input_ids"].shape[1] == seq:
            case.notes.append("other: same sequence length (the model pinned it)")
    elif main == "pixel_values":
        import torch

        candidates = _image_inputs(model, 2, 0)
        sample, error = _first_running(model, _with_decoder(model, ids, candidates, 2, 3, 0))
        extra = sample is None
        if extra:
            sample, extra_error = _first_running(model, [_extras(model, ids, x, 0) for x in candidates])
            error = extra_error if _extras(model, ids, candidates[0], 0).keys() != candidates[0].keys() else error
        if sample is None:
            raise error
        gen = torch.Generator().manual_seed(1)
        other = {"pixel_values": torch.randn(3, *sample["pixel_values"].shape[1:], generator=gen)}
        if extra:
            other = _extras(model, ids, other, 1)
        _decoder_inputs(model, ids, other, 3, 5, 1)
        _eager(model, other)
    elif main == "input_features":
        sample = other = None
        error = None
        for frames in (64, 128, 32, 100, 200, 400, 3000):
            sample, error = _first_running(
                model, _with_decoder(model, ids, _audio_feature_inputs(model, 2, frames, 0), 2, 3, 0)
            )
            if sample is not None:
                break
        if sample is None:
            raise error
        frames_axis = 2 if sample["input_features"].shape[1] != frames else 1
        frames = sample["input_features"].shape[frames_axis]
        for more in (frames + frames // 2, frames):
            cands = _audio_feature_inputs(model, 3, more, 1)
            cands = [c for c in cands if c["input_features"].shape[1:].numel() and _same_layout(c, sample, frames_axis)]
            other, _err = _first_running(model, _with_decoder(model, ids, cands, 3, 5, 1))
            if other is not None:
                if more == frames:
                    case.notes.append("other: same number of frames (the model pinned it)")
                break
        if other is None:
            raise _err
    elif main == "input_values" or main == "inputs":  # waveforms (a speech encoder-decoder names them inputs)

        def waves(batch: int, samples: int, seed: int) -> list[dict[str, Any]]:
            return [
                {(main if k == "input_values" else k): v for k, v in c.items()}
                for c in _waveform_inputs(model, batch, samples, seed)
            ]

        sample = other = None
        error = None
        for samples in (4000, 8000, 16000):
            sample, error = _first_running(model, _with_decoder(model, ids, waves(2, samples, 0), 2, 3, 0))
            if sample is not None:
                break
        if sample is None:
            raise error
        rank = sample[main].dim()
        length = sample[main].shape[-1]
        for more in (length + length // 2, length):
            cands = [c for c in waves(3, more, 1) if c[main].dim() == rank]
            other, _err = _first_running(model, _with_decoder(model, ids, cands, 3, 5, 1))
            if other is not None:
                if more == length:
                    case.notes.append("other: same number of samples (the model pinned it)")
                break
        if other is None:
            raise _err
    else:
        raise BuildSkip(f"main input {main!r} (no sample-input builder for it)")
    case.sample, case.other = sample, other


def _fixed_canvas(case: Case, ids: _Ids) -> None:
    """A forward that samples its decoder canvas when ``decoder_input_ids`` is missing (block diffusion) gets one
    (``canvas_length`` random ids, seeded), so eager is a deterministic reference."""
    import torch

    length = _get(case.model.config, "canvas_length", default=None)
    if "decoder_input_ids" not in _params(case.model) or not _int(length):
        return
    for seed, inputs in enumerate((case.sample, case.other)):
        first = next(v for v in inputs.values() if torch.is_tensor(v))
        inputs.setdefault("decoder_input_ids", ids(first.shape[0], length, seed + 11))
    _eager(case.model, case.sample)


def _check_finite(model: Any, inputs: dict[str, Any]) -> None:
    """Raise when eager's floating outputs on ``inputs`` are not all finite (a degenerate reference)."""
    import torch

    out = _eager(model, inputs)
    values = out.values() if isinstance(out, dict) else (out if isinstance(out, (tuple, list)) else [out])
    for value in values:
        if torch.is_tensor(value) and value.is_floating_point() and not bool(torch.isfinite(value).all()):
            raise ValueError("eager output is not finite (the tiny random model overflows or vanishes)")


def _same_layout(candidate: dict[str, Any], sample: dict[str, Any], frames_axis: int) -> bool:
    other_axis = 3 - frames_axis
    same_mask = ("attention_mask" in candidate) == ("attention_mask" in sample)
    return same_mask and candidate["input_features"].shape[other_axis] == sample["input_features"].shape[other_axis]


def _with_decoder(model: Any, ids: _Ids, candidates: list[dict[str, Any]], batch: int, dec: int, seed: int) -> list:
    for inputs in candidates:
        _decoder_inputs(model, ids, inputs, batch, dec, seed)
    return candidates


def _probe(types: list[str]) -> None:
    """Build each type and print one line: ok (the input shapes) / SKIP / FAIL with the reason."""
    import warnings

    warnings.filterwarnings("ignore")
    from transformers.utils import logging

    logging.set_verbosity_error()
    for model_type in types:
        try:
            case = build_case(model_type)
            shapes = {k: tuple(v.shape) for k, v in case.sample.items() if hasattr(v, "shape")}
            other = {k: tuple(v.shape) for k, v in case.other.items() if hasattr(v, "shape")}
            print(f"OK   {model_type:32s} {case.head:24s} {shapes} -> {other} {'; '.join(case.notes)}", flush=True)
        except BuildSkip as exc:
            print(f"SKIP {model_type:32s} {exc}", flush=True)
        except Exception as exc:  # noqa: BLE001
            print(f"FAIL {model_type:32s} {_one_line(exc)}", flush=True)


if __name__ == "__main__":
    import sys

    _probe(sys.argv[1:] or [a.model_type for a in enumerate_architectures()])
