"""Shrinking a config dict: every size field recognised by name, with the relations between sizes kept."""

from __future__ import annotations

import copy
import math
import re
from typing import Any

from _tiny_fields import (
    _EXPERTS,
    _FFN,
    _HEAD_DIM,
    _HEADS,
    _HIDDEN,
    _IMAGE,
    _KV_HEADS,
    _LAYER_KEYS,
    _MEL,
    _MOE_FFN,
    _NO_SHRINK,
    _PATCH,
    _POSITIONS,
    _RANK,
    _SPECIAL,
    _STAGE_DEPTHS,
    _STAGE_HEADS,
    _STAGE_SIZES,
    _TOP_K,
    _VOCAB,
    _WINDOW,
    EXPERTS,
    FFN,
    HEAD_DIM,
    HEADS_N,
    HIDDEN,
    IMAGE,
    KV_HEADS,
    MAX_LAYERS,
    MOE_FFN,
    PATCH,
    POSITIONS,
    TOP_K,
    VOCAB,
    _int,
)
from _tiny_overrides import OVERRIDES


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
            if isinstance(v, str) and (not re.fullmatch(r"[A-Za-z\-\*]+", v) or len(set(v)) > 4):  # a word
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
    # a width named *_dim(ension) that equalled another shrunk one stays equal (Mimi: codebook_dim = the quantizer's
    # vector_quantization_hidden_dimension)
    dims = {original[k]: d[k] for k in d if _DIM_NAME.search(str(k)) and _int(original.get(k)) and d[k] != original[k]}
    for k in untouched:
        if _DIM_NAME.search(k) and _int(d.get(k)) and d[k] == original.get(k) and original[k] in dims:
            d[k] = dims[original[k]]


_DIM_NAME = re.compile(r"(_dim|_dimension)$")


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


def _fix_merged_widths(d: dict[str, Any], original: dict[str, Any]) -> None:
    """A width that was the vision tower's width times merge x merge (the pixel shuffle's output, the projector's
    input: Muse Glimmer's ``out_hidden_size``) stays so."""
    vision, old_vision = d.get("vision_config"), original.get("vision_config")
    if not isinstance(vision, dict) or not isinstance(old_vision, dict):
        return
    merge = next((old_vision[k] for k in ("spatial_merge_size", "merge_size") if _int(old_vision.get(k))), None)
    old_width, width = old_vision.get("hidden_size"), vision.get("hidden_size")
    if not merge or merge < 2 or not _int(old_width) or not _int(width):
        return
    for k, v in original.items():
        if isinstance(k, str) and _int(v) and v == old_width * merge * merge and _int(d.get(k)):
            d[k] = width * merge * merge


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
    """M-RoPE sections must sum to half the (shrunk) rotary head dim. Per-layer-type RoPE parameters (a dict keyed by
    the layer types) that the defaults leave empty (the checkpoint sets them) get default RoPE for every type."""
    types = d.get("layer_types")
    rope = d.get("rope_parameters")
    if isinstance(types, list) and types and all(isinstance(t, str) for t in types) and isinstance(rope, dict):
        if not rope:
            for kind in dict.fromkeys(types):
                rope.setdefault(kind, {"rope_type": "default", "rope_theta": 10000.0})
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
    _fix_merged_widths(out, original)
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
            if _int(out.get("mamba_d_ssm")):  # an explicit SSM width (Falcon-H1) replaces expand x hidden: scaled
                out["mamba_d_ssm"] = expand * out.get("hidden_size", HIDDEN)
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


def special_token_ids(config: Any) -> set[int]:
    found: set[int] = set()
    _special_ids(config.to_dict(), found)
    return found
