"""The only per-type knowledge of the tiny-config harness: config overrides the shrinker cannot know, and the
model types that cannot be built from a config alone (each with its reason)."""

from __future__ import annotations

from typing import Any

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
    "hunyuan_vl_text": (
        {"rope_parameters": {"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [1, 1, 1, 1]}},
        "its M-RoPE needs at least 3 sections (the checkpoint sets them; the defaults have none), summing to half "
        "the head dim (8 at the tiny size)",
    ),
    "qwen4_exp_text": (
        {
            "indexer_n_heads": 2,
            "indexer_kv_heads": 1,
            "indexer_head_dim": 32,
            "indexer_budget": 8,
            "indexer_compress_ratio": 4,
        },
        "the QSA indexer fields default to None while every full-attention layer builds its indexer from them "
        "(indexer_budget // indexer_compress_ratio): a config must set them",
    ),
    "ernie4_5_vl_moe_text": (
        {"rope_parameters": {"rope_type": "default", "rope_theta": 500000.0, "mrope_section": [1, 1, 2]}},
        "its RoPE init pre-rotates by M-RoPE sections its modeling code defaults to [22, 22, 20] (half of head_dim "
        "128): the tiny head_dim 8 needs sections summing to 4",
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
    "llama4_vision_model": (
        {"intermediate_size": 128, "projector_input_dim": 32, "projector_output_dim": 32},
        "the pixel-shuffle MLP takes hidden / ratio^2 channels (32 / 0.5^2 = 128) as its intermediate size, and its "
        "projector widths (4096) are the vision output width (shrunk to 32)",
    ),
    "dbrx": (
        {"attn_config": {"attn_pdrop": 0.0, "clip_qkv": 8.0, "kv_n_heads": 2, "rope_theta": 10000.0}},
        "its attention clamps q/k/v by clip_qkv unconditionally (None fails) and reads rope_theta from the attention "
        "config, which declares neither (the checkpoint's attn_config sets both)",
    ),
    "xcodec2": (
        {"quantization_dim": 64},
        "the quantizer projects the fused semantic + acoustic width (2 x hidden_size: 2048 at the defaults, 64 "
        "tiny) from quantization_dim",
    ),
    "neucodec": (
        {"quantization_dim": 64},
        "as xcodec2: the quantizer's input is the fused width, 2 x hidden_size",
    ),
    "lfm2_moe": (
        {"layer_types": ["conv", "full_attention"]},
        "layer_types defaults to None (the checkpoint sets it) while every layer reads its kind from it: one "
        "convolution and one attention layer (the 2 tiny layers)",
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
