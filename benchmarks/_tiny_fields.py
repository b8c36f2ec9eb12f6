"""The config fields the tiny-config shrinker recognises by name, and the sizes it shrinks them to."""

from __future__ import annotations

import re
from typing import Any

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
    r"adapter_in_dim|adapter_out_dim|adapter_input_size|"
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
