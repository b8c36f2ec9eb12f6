"""Patches of transformers' modeling code that pins a dynamic axis while tracing, without changing a number.

torch.export specializes an axis when the model's code turns its size into a Python value: a list built from
``range(size)``, a Python loop over the rows of a batch. Each patch below replaces one such method with the same
computation written on tensors, so the axis stays symbolic; eager results are bit-identical (the same ops on the
same values, in the same order). A patch applies only while a model holding an instance of its class is traced
(:func:`symbolic_sizes`); its class is looked up in the modeling module the model already imported, so a model
type that is not used costs nothing, and a class or method that is gone raises ``PatchTargetMissing``.

* ``CpmAntModel._prepare_attention_mask`` (transformers/models/cpmant/modeling_cpmant.py): the left-padding mask
  is built from ``torch.tensor(list(range(seqlen - prompt_length))[::-1])``, which pins the sequence length.
* ``ReformerAxialPositionEmbeddings.forward`` (transformers/models/reformer/modeling_reformer.py), in eval mode:
  the position encodings are gathered row by row (``for i in range(batch_size)``), which pins the batch, after
  cutting the table to ``position_ids.max().item() + 1`` positions, a data-dependent size. Gathering every row at
  once from the whole table returns the same encodings.
* ``ClvpRotaryPositionalEmbedding.forward`` (transformers/models/clvp/modeling_clvp.py): the embedding is cached
  under the last sequence length seen (``sequence_length == self.cached_sequence_length``); tracing compares the
  symbolic length with that Python int and pins it. The patch computes the embedding every call (no cache).
* ``mamba_selective_scan`` (a module-level function of transformers/models/{mamba,falcon_mamba,jamba,zamba}/
  modeling_*.py, patched where the model holds the module's mixer): its reference path loops over the sequence in
  Python, which pins it; the patch runs the same step under torch's ``scan`` / ``while_loop``
  (:mod:`hub_export.patches.recurrence`).
* ``RecurrentGemmaRglru._rnn_scan`` (transformers/models/recurrent_gemma/modeling_recurrent_gemma.py): the RG-LRU's
  linear mode loops over the sequence in Python; the patch runs the same step under ``scan`` / ``while_loop``.
* ``EncodecConv1d.forward`` and its copies in Mimi and PocketTTS (transformers/models/encodec/modeling_encodec.py):
  the pad widths are computed on int64 tensor buffers and read back as data-dependent values; the patch pads by the
  convolution's Python integers (:mod:`hub_export.patches.audio_codecs`).
* ``EncodecModel.encode`` (same module), without chunks: a Python loop over ``range(0, length, length)`` (one
  chunk) pins the length; the patch runs its one iteration.
* ``NeuCodecModel.forward`` (transformers/models/neucodec/modeling_neucodec.py): the decoded audio is cut to
  ``int(length * 1.5)`` (the output over the input sampling rate, a Python float), which pins the length; the patch
  computes it on integers (:mod:`hub_export.patches.audio_codecs`).
* ``Nemotron3_5TranscribeAudioModel._get_chunks`` and ``Nemotron3DiarizationForAudioFrameClassification.forward``:
  offline chunks listed by a Python loop over ``range(0, frames, chunk_length)``, which pins the length; a traced
  sample of one chunk runs that one iteration, the length bounded by a chunk (:mod:`hub_export.patches.chunks`).
* ``LongformerSelfAttention.forward`` and ``_get_global_attn_indices`` (transformers/models/longformer/
  modeling_longformer.py; ``LEDEncoderSelfAttention`` copies them): the layer branches on ``is_global_attn``, read from
  the mask's values; the patch takes the global branch for every mask (the same numbers without global tokens) with
  the global-token count a bounded size (:mod:`hub_export.patches.global_attention`).
* ``LongformerModel.forward``, ``LEDEncoder.forward``, ``PegasusXEncoder.forward``: the sequence is padded to a
  multiple of the attention window / block only when it is not one, then cut by a strided slice; the patch pads the
  inputs first (:mod:`hub_export.patches.padding`).
* ``LongcatFlashExperts.forward``, ``Step3p7Experts.forward``, ``SwitchTransformersExperts.forward`` and
  ``DbrxExperts.forward``: loops over the experts hit (``nonzero``), run over every expert instead
  (:mod:`hub_export.patches.experts`).
* ``get_rope_index`` of the Qwen2-VL family's models (transformers/models/qwen2_vl/modeling_qwen2_vl.py and the
  modules copying it, three forms): M-RoPE positions from ``itertools.groupby`` over each row's token types and a loop
  over the images pin the batch, the sequence and the image count; the patch computes them per token
  (:func:`~hub_export.patches.multimodal.mrope_positions`).
* ``FunnelAttentionStructure.get_position_embeds`` (transformers/models/funnel/modeling_funnel.py), relative-shift
  attention: the positions of every block are a Python list built from ``list(range(seq_len))``, which pins the
  sequence; the patch computes the same ``arange`` bounds from each block's first position, step and count.
* ``rwkv_linear_attention_cpu`` (transformers/models/rwkv/modeling_rwkv.py, patched where the model holds
  ``RwkvSelfAttention``): its loop over the sequence runs under ``scan`` / ``while_loop``.
* ``resize_positional_embeddings`` of SigLIP2 and Cosmos-3 Edge, ``HunYuanVLVisionPatchEmbed.forward``: a learned
  position table resized per image by ``F.interpolate(size=(h, w))`` in a loop over the grid pins the image count
  and the grid; the patch resizes it for every patch at once (:mod:`hub_export.patches.resized_positions`).
* ``Lfm2VlModel.get_image_features``, ``Lfm3VlVisionShortConv.forward``, ``HunYuanVLVisionTransformer.forward``:
  per-image pixel unshuffle, per-frame depthwise convolution and per-image patch merger in Python loops over the grid, gathered for every patch at once
  (:mod:`hub_export.patches.packed_images`).
* ``VideoLlama3VisionModel.pixel_unshuffle``: each image's grid resized by ``F.interpolate`` in a Python loop over
  the grid, gathered as bilinear samples for every output token at once (:mod:`hub_export.patches.packed_images`).
* ``length_regulator`` and ``FastSpeech2ConformerRelPositionalEncoding.extend_pos_enc``: a branch on the durations'
  values, a loop over the batch and a branch on the data-dependent frame count (:mod:`hub_export.patches.durations`).
* ``HunYuanVLModel.get_placeholder_mask``, ``Ovis2Model.forward``: a Python ``if`` on the placeholder tokens (a
  count check, a write under ``mask.any()``), traced as a check and a select (:mod:`hub_export.patches.placeholders`).
* ``torch.nn.LSTM.forward`` (torch/nn/modules/rnn.py): ``aten.lstm`` is a composite op that torch.export decomposes
  into one cell per time step at the traced length; the patch runs each layer's cell under ``scan`` / ``while_loop``.
* ``CanineAttention.forward`` (transformers/models/canine/modeling_canine.py), local: a Python loop over chunks of
  the sequence, each attending to its window, pins the sequence; the patch runs one attention with a window mask
  (:mod:`hub_export.patches.local_attention`). ``CanineModel._downsample_attention_mask``: ``MaxPool1d`` computes
  its output size on the traced length; the patch takes the windows' maximum after a reshape.
* ``MiniMaxLightningAttention.forward`` (transformers/models/minimax/modeling_minimax.py), without a cache: a Python
  loop over blocks of ``block_size`` tokens bounds the sequence to the traced block count; the patch runs each block
  under ``scan`` / ``while_loop`` over the sequence zero-padded to whole blocks.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from ..errors import PatchTargetMissing
from ._base import patch_attribute
from .audio_codecs import (
    CONV_PADDING_CLASSES,
    conv1d_padded_on_integers,
    encodec_encode_one_chunk,
    neucodec_output_length_on_integers,
)
from .chunks import diarization_one_chunk, transcribe_one_chunk
from .durations import length_regulator_gathered, positions_within_table
from .experts import dbrx_experts, longcat_experts, step3p7_experts, switch_experts
from .global_attention import global_branch_always, global_flag_not_read, global_indices_bounded
from .local_attention import canine_downsampled_mask, canine_local_attention
from .multimodal import (
    rope_index_ernie,
    rope_index_hunyuan_vl,
    rope_index_qwen2,
    rope_index_qwen2_5,
    rope_index_qwen3,
)
from .packed_images import (
    ernie4_5_vl_temporal_slicing,
    hunyuan_vl_vision,
    lfm2_vl_image_features,
    lfm3_vl_grid_kept,
    lfm3_vl_short_conv,
    paddleocr_vl_projector,
    video_llama_3_pixel_unshuffle,
)
from .padding import attention_window, block_size, padded_to_multiple
from .placeholders import hunyuan_vl_placeholder_mask, ovis2_indicators_selected
from .recurrence import lightning_attention_blocks, lstm_forward, mamba_selective_scan, rglru_scan, rwkv_wkv_scan
from .resized_positions import cosmos3_edge_resize, hunyuan_vl_patch_embed, siglip2_resize

__all__ = ["ModelingPatch", "MODELING_PATCHES", "symbolic_sizes"]


@dataclass(frozen=True)
class ModelingPatch:
    """One method of transformers' modeling code replaced while tracing.

    Attributes:
        module: The modeling module holding the class (``transformers.models.<type>.modeling_<type>``).
        owner: The class whose method pins an axis; empty for a function of the module itself.
        name: The method (or the module's function).
        replacement: ``replacement(original) -> method``: the method to trace (it may call ``original``).
        reason: What in the upstream code pins which axis.
        holder: For a module function: the module's class whose instances call it (the patch applies to models
            holding one).
    """

    module: str
    owner: str
    name: str
    replacement: Callable[[Callable[..., Any]], Callable[..., Any]]
    reason: str
    holder: str = ""


def _cpmant_attention_mask(original: Callable[..., Any]) -> Callable[..., Any]:
    def prepare_attention_mask(self: Any, input_ids: Any, span: Any, context: Any, length: Any) -> Any:
        import torch

        batch, seqlen = input_ids.shape[0], input_ids.shape[1]
        device = input_ids.device
        steps = torch.arange(seqlen, device=device)
        causal = (steps <= steps.view(-1, 1)).view(1, seqlen, seqlen)
        mask = context[:, None, :] | (context[:, :, None].logical_not() & causal)
        mask = mask & (span[:, None, :] == span[:, :, None])
        # upstream: torch.tensor(list(range(seqlen - prompt_length))[::-1]) -- the same descending int64 range
        descending = torch.arange(seqlen - self.prompt_length - 1, -1, -1, device=device)
        mask_1d = descending[None, :].repeat(batch, 1) < length[:, None]
        prompt = torch.ones(batch, self.prompt_length, device=device).bool()
        mask_1d = torch.cat((prompt, mask_1d), dim=1)
        return mask_1d.view(batch, seqlen, 1) & mask_1d.view(batch, 1, seqlen) & mask

    return prepare_attention_mask


def _reformer_axial_positions(original: Callable[..., Any]) -> Callable[..., Any]:
    def forward(self: Any, position_ids: Any) -> Any:
        import torch

        if self.training:  # the training path has no loop: upstream's own
            return original(self, position_ids)
        batch_size, sequence_length = position_ids.shape
        axial_h, axial_w = self.axial_pos_shape
        torch._check(sequence_length <= axial_h * axial_w)
        table = torch.cat([weight.expand(*self.axial_pos_shape, weight.shape[-1]) for weight in self.weights], -1)
        table = table.reshape(1, axial_h * axial_w, table.shape[-1]).expand(batch_size, -1, -1)
        index = position_ids[:, :, None].expand(-1, -1, table.shape[-1])
        return torch.gather(table, 1, index)

    return forward


def _clvp_rotary(original: Callable[..., Any]) -> Callable[..., Any]:
    def forward(self: Any, hidden_states: Any) -> Any:
        import torch

        steps = torch.arange(hidden_states.shape[1], device=hidden_states.device).type_as(self.inv_freq)
        freqs = steps[:, None] * self.inv_freq
        return torch.cat((freqs, freqs), dim=-1).unsqueeze(0)

    return forward


def _funnel_position_embeds(original: Callable[..., Any]) -> Callable[..., Any]:
    """Funnel's relative-shift position vectors from the first, last and count of each block's positions.

    Upstream keeps the positions as a Python list (``list(range(seq_len))``, pooled by slicing) and reads only its
    first and last items and its length. Here a block's positions are ``[head] + [first + step * i for i < count]``
    (the leading ``<cls>`` kept apart), pooled by arithmetic on those integers: the same ``arange`` bounds, on
    symbolic sizes."""

    def last(head: Any, first: Any, step: Any, count: Any) -> Any:
        return first + step * (count - 1) if count > 0 else head  # a guard on a symbolic count: a minimum length

    def get_position_embeds(self: Any, seq_len: Any, dtype: Any, device: Any) -> Any:
        import torch

        if self.config.attention_type == "factorized":
            return original(self, seq_len, dtype, device)
        d_model = self.config.d_model
        freq_seq = torch.arange(0, d_model // 2, 1.0, dtype=torch.int64, device=device).to(dtype)
        inv_freq = 1 / (10000 ** (freq_seq / (d_model // 2)))
        rel_pos_id = torch.arange(-seq_len * 2, seq_len * 2, 1.0, dtype=torch.int64, device=device).to(dtype)
        zero_offset = seq_len * 2
        sinusoid = rel_pos_id[:, None] * inv_freq[None]
        pos_embed = torch.cat([self.sin_dropout(torch.sin(sinusoid)), self.cos_dropout(torch.cos(sinusoid))], dim=-1)

        def vectors(pos: tuple[Any, ...], pooled: tuple[Any, ...], stride: int, shift: int) -> Any:
            # upstream's relative_pos: from the first items, the last of `pos` and the length of `pooled`
            max_dist = pooled[0] - pos[0] + shift * (1 + pooled[3]) * stride
            min_dist = pooled[0] - last(*pos)
            rel_pos = torch.arange(max_dist, min_dist - 1, -stride, dtype=torch.long, device=device)
            rel_pos = rel_pos[:, None] + zero_offset
            return torch.gather(pos_embed, 0, rel_pos.expand(rel_pos.size(0), d_model))

        pos: tuple[Any, ...] = (0, 1, 1, seq_len - 1)  # head, first, step, count: list(range(seq_len))
        position_embeds_list = []
        for block_index in range(self.config.num_blocks):
            pooling = None
            pooled = pos
            if block_index > 0:
                head, first, step, count = pos
                if self.config.separate_cls:  # upstream's stride_pool_pos
                    kept = count - 1 if self.config.truncate_seq else count
                    pooled = (1 - 2**block_index, first, 2 * step, (kept + 1) // 2)
                else:
                    pooled = (head, first + step, 2 * step, count // 2)
                pooling = vectors(pos, pooled, 2 ** (block_index - 1), shift=2)
            pos = pooled
            position_embeds_list.append([vectors(pos, pos, 2**block_index, shift=1), pooling])
        return position_embeds_list

    return get_position_embeds


#: every modeling patch, applied by :func:`symbolic_sizes` to the models that hold its class
MODELING_PATCHES: tuple[ModelingPatch, ...] = (
    ModelingPatch(
        "transformers.models.cpmant.modeling_cpmant",
        "CpmAntModel",
        "_prepare_attention_mask",
        _cpmant_attention_mask,
        "CPM-Ant's left-padding mask built from a Python list of range(sequence) pins the sequence length",
    ),
    ModelingPatch(
        "transformers.models.reformer.modeling_reformer",
        "AxialPositionEmbeddings",
        "forward",
        _reformer_axial_positions,
        "Reformer's axial position encodings gathered row by row (a Python loop over the batch) pin the batch",
    ),
    ModelingPatch(
        "transformers.models.clvp.modeling_clvp",
        "ClvpRotaryPositionalEmbedding",
        "forward",
        _clvp_rotary,
        "CLVP's rotary embedding is cached under the last Python sequence length it saw: comparing the traced "
        "length with it pins the sequence",
    ),
    *(
        ModelingPatch(
            f"transformers.models.{kind}.modeling_{kind}",
            "",
            "mamba_selective_scan",
            mamba_selective_scan,
            f"{mixer}'s selective scan loops over the sequence in Python (its CUDA kernels absent), pinning it",
            holder=mixer,
        )
        for kind, mixer in (
            ("mamba", "MambaMixer"),
            ("falcon_mamba", "FalconMambaMixer"),
            ("jamba", "JambaMambaMixer"),
            ("zamba", "ZambaMambaMixer"),
        )
    ),
    ModelingPatch(
        "transformers.models.recurrent_gemma.modeling_recurrent_gemma",
        "RecurrentGemmaRglru",
        "_rnn_scan",
        rglru_scan,
        "RecurrentGemma's RG-LRU loops over the sequence in Python (its linear mode), pinning it",
    ),
    *(
        ModelingPatch(
            f"transformers.models.{kind}.modeling_{kind}",
            owner,
            "get_rope_index",
            replacement,
            f"{owner}.get_rope_index groups each row's token types with itertools.groupby over .tolist() and loops "
            "over the images, pinning the batch, the sequence and the image count",
        )
        for kind, owner, replacement in (
            ("qwen2_vl", "Qwen2VLModel", rope_index_qwen2),
            ("paddleocr_vl", "PaddleOCRVLModel", rope_index_qwen2),
            ("qwen2_5_vl", "Qwen2_5_VLModel", rope_index_qwen2_5),
            ("qwen3_vl", "Qwen3VLModel", rope_index_qwen3),
            ("qwen3_vl_moe", "Qwen3VLMoeModel", rope_index_qwen3),
            ("qwen3_5", "Qwen3_5Model", rope_index_qwen3),
            ("qwen3_5_moe", "Qwen3_5MoeModel", rope_index_qwen3),
            ("qwen4_exp", "Qwen4ExpModel", rope_index_qwen3),
            ("glm4v", "Glm4vModel", rope_index_qwen3),
            ("glm4v_moe", "Glm4vMoeModel", rope_index_qwen3),
            ("glm46v", "Glm46VModel", rope_index_qwen3),
            ("glm_ocr", "GlmOcrModel", rope_index_qwen3),
            ("cosmos3_omni", "Cosmos3OmniModel", rope_index_qwen3),
            ("cosmos3_edge", "Cosmos3EdgeModel", rope_index_qwen3),
            ("cohere_compass", "CohereCompassModel", rope_index_qwen3),
            ("hunyuan_vl", "HunYuanVLModel", rope_index_hunyuan_vl),
            ("ernie4_5_vl_moe", "Ernie4_5_VLMoeModel", rope_index_ernie),
        )
    ),
    *(
        ModelingPatch(
            f"transformers.models.{kind}.modeling_{kind}",
            owner,
            name,
            replacement,
            f"{owner}.{name} resizes the learned position table per image with F.interpolate(size=(h, w)) in a "
            "Python loop over the grid, pinning the image count and the grid",
        )
        for kind, owner, name, replacement in (
            ("siglip2", "Siglip2VisionEmbeddings", "resize_positional_embeddings", siglip2_resize),
            ("cosmos3_edge", "Cosmos3EdgeVisionEmbeddings", "resize_positional_embeddings", cosmos3_edge_resize),
            ("hunyuan_vl", "HunYuanVLVisionPatchEmbed", "forward", hunyuan_vl_patch_embed),
        )
    ),
    ModelingPatch(
        "transformers.models.lfm2_vl.modeling_lfm2_vl",
        "Lfm2VlModel",
        "get_image_features",
        lfm2_vl_image_features,
        "LFM2-VL cuts, pixel-unshuffles and projects each image's features in a Python loop over the images",
    ),
    ModelingPatch(
        "transformers.models.paddleocr_vl.modeling_paddleocr_vl",
        "PaddleOCRProjector",
        "forward",
        paddleocr_vl_projector,
        "PaddleOCR-VL's projector splits the features by grid_thw.prod(-1).tolist() and merges each image's blocks in "
        "a Python loop over the grid, pinning the image count and the grid",
    ),
    ModelingPatch(
        "transformers.models.ernie4_5_vl_moe.modeling_ernie4_5_vl_moe",
        "Ernie4_5_VLMoeVariableResolutionResamplerModel",
        "_temporal_slicing",
        ernie4_5_vl_temporal_slicing,
        "ERNIE-4.5-VL's resampler builds its frame offsets with torch.arange in a Python loop over the grid's rows "
        "and range(t), pinning the image count",
    ),
    ModelingPatch(
        "transformers.models.lfm3_vl.modeling_lfm3_vl",
        "Lfm3VlVisionShortConv",
        "forward",
        lfm3_vl_short_conv,
        "LFM3-VL convolves each frame's grid in a Python loop over grid_thw.tolist(), pinning the images and grid",
    ),
    ModelingPatch(
        "transformers.models.lfm3_vl.modeling_lfm3_vl",
        "Lfm3VlVisionModel",
        "forward",
        lfm3_vl_grid_kept,
        "LFM3-VL's vision model hands grid_thw.tolist() to its layers, pinning the images and grid",
    ),
    ModelingPatch(
        "transformers.models.hunyuan_vl.modeling_hunyuan_vl",
        "HunYuanVLVisionTransformer",
        "forward",
        hunyuan_vl_vision,
        "HunYuan-VL merges each image's patches in a Python loop over grid_thw.tolist(), pinning the images and grid",
    ),
    ModelingPatch(
        "transformers.models.video_llama_3.modeling_video_llama_3",
        "VideoLlama3VisionModel",
        "pixel_unshuffle",
        video_llama_3_pixel_unshuffle,
        "VideoLLaMA3 resizes each image's grid with F.interpolate in a Python loop over grid_thw, pinning the grid",
    ),
    ModelingPatch(
        "transformers.models.fastspeech2_conformer.modeling_fastspeech2_conformer",
        "",
        "length_regulator",
        length_regulator_gathered,
        "FastSpeech2-Conformer's length regulator branches on the durations' sum and loops over the batch",
        holder="FastSpeech2ConformerModel",
    ),
    ModelingPatch(
        "transformers.models.fastspeech2_conformer.modeling_fastspeech2_conformer",
        "FastSpeech2ConformerRelPositionalEncoding",
        "extend_pos_enc",
        positions_within_table,
        "FastSpeech2-Conformer rebuilds its positional table when a length needs more: a branch on the "
        "data-dependent spectrogram length",
    ),
    ModelingPatch(
        "transformers.models.funnel.modeling_funnel",
        "FunnelAttentionStructure",
        "get_position_embeds",
        _funnel_position_embeds,
        "Funnel's relative-shift position vectors are built from list(range(sequence)), pinning the sequence",
    ),
    ModelingPatch(
        "transformers.models.rwkv.modeling_rwkv",
        "",
        "rwkv_linear_attention_cpu",
        rwkv_wkv_scan,
        "RWKV's WKV attention without its CUDA kernel loops over the sequence in Python, pinning it",
        holder="RwkvSelfAttention",
    ),
    ModelingPatch(
        "torch.nn.modules.rnn",
        "LSTM",
        "forward",
        lstm_forward,
        "torch's LSTM decomposes into one cell per time step while exporting (the RNN-T prediction networks of "
        "Parakeet and Nemotron ASR, EnCodec), pinning the sequence",
    ),
    *(
        ModelingPatch(
            f"transformers.models.{kind}.modeling_{kind}",
            owner,
            "forward",
            conv1d_padded_on_integers,
            f"{owner} computes its pad widths on int64 tensor buffers: read back while tracing they are "
            "data-dependent values (GuardOnDataDependentSymNode)",
        )
        for kind, owner in CONV_PADDING_CLASSES
    ),
    ModelingPatch(
        "transformers.models.encodec.modeling_encodec",
        "EncodecModel",
        "encode",
        encodec_encode_one_chunk,
        "EnCodec without chunks loops over range(0, length, length) in Python (one chunk), pinning the length",
    ),
    ModelingPatch(
        "transformers.models.neucodec.modeling_neucodec",
        "NeuCodecModel",
        "forward",
        neucodec_output_length_on_integers,
        "NeuCodec cuts its audio to int(length * output_rate / input_rate), a Python float: int() pins the length",
    ),
    ModelingPatch(
        "transformers.models.nemotron3_5_transcribe.modeling_nemotron3_5_transcribe",
        "Nemotron3_5TranscribeAudioModel",
        "_get_chunks",
        transcribe_one_chunk,
        "Nemotron 3.5 Transcribe lists its chunks with a Python loop over range(0, frames, chunk_length), pinning "
        "the length",
    ),
    ModelingPatch(
        "transformers.models.nemotron3_diarization.modeling_nemotron3_diarization",
        "Nemotron3DiarizationForAudioFrameClassification",
        "forward",
        diarization_one_chunk,
        "Nemotron 3 Diarization runs its encoder in a Python loop over range(0, frames, chunk_length), pinning the "
        "length",
    ),
    *(
        ModelingPatch(
            f"transformers.models.{kind}.modeling_{kind}",
            owner,
            name,
            replacement,
            f"{owner} branches on is_global_attn, read back from the attention mask's values with .item(): "
            "GuardOnDataDependentSymNode, or an export for one mask",
        )
        for kind, owner, name, replacement in (
            ("longformer", "LongformerSelfAttention", "forward", global_branch_always),
            ("longformer", "LongformerSelfAttention", "_get_global_attn_indices", global_indices_bounded),
            ("longformer", "LongformerEncoder", "forward", global_flag_not_read),
            ("led", "LEDEncoderSelfAttention", "forward", global_branch_always),
            ("led", "LEDEncoderSelfAttention", "_get_global_attn_indices", global_indices_bounded),
            ("led", "LEDEncoder", "forward", global_flag_not_read),
        )
    ),
    *(
        ModelingPatch(
            f"transformers.models.{kind}.modeling_{kind}",
            owner,
            "forward",
            padded_to_multiple(multiple),
            f"{owner} pads the sequence to a multiple of its block only when it is not one, then cuts the padding "
            "off by a strided slice: guards on the sequence's remainder, which bound the sequence",
        )
        for kind, owner, multiple in (
            ("longformer", "LongformerModel", attention_window),
            ("led", "LEDEncoder", attention_window),
            ("pegasus_x", "PegasusXEncoder", block_size),
        )
    ),
    ModelingPatch(
        "transformers.models.longcat_flash.modeling_longcat_flash",
        "LongcatFlashExperts",
        "forward",
        longcat_experts,
        "LongCat-Flash's experts loop over the ids hit (nonzero, then .item()): data-dependent values",
    ),
    ModelingPatch(
        "transformers.models.step3p7.modeling_step3p7",
        "Step3p7Experts",
        "forward",
        step3p7_experts,
        "Step 3.7's experts loop over the ids hit (nonzero, then a compare per id): data-dependent values",
    ),
    ModelingPatch(
        "transformers.models.hunyuan_vl.modeling_hunyuan_vl",
        "HunYuanVLModel",
        "get_placeholder_mask",
        hunyuan_vl_placeholder_mask,
        "HunYuan-VL checks its placeholder count with a Python if on a data-dependent numel()",
    ),
    ModelingPatch(
        "transformers.models.ovis2.modeling_ovis2",
        "Ovis2Model",
        "forward",
        ovis2_indicators_selected,
        "Ovis2 writes its visual indicators under if mask.any(): a branch on the input ids",
    ),
    ModelingPatch(
        "transformers.models.canine.modeling_canine",
        "CanineAttention",
        "forward",
        canine_local_attention,
        "CANINE's local attention loops over chunks of the sequence in Python (range(0, seq_len, stride)), "
        "pinning the sequence",
    ),
    ModelingPatch(
        "transformers.models.canine.modeling_canine",
        "CanineModel",
        "_downsample_attention_mask",
        canine_downsampled_mask,
        "CANINE pools its character mask with MaxPool1d, whose output size is computed on the traced length, "
        "pinning the sequence",
    ),
    ModelingPatch(
        "transformers.models.minimax.modeling_minimax",
        "MiniMaxLightningAttention",
        "forward",
        lightning_attention_blocks,
        "MiniMax's lightning attention loops over blocks of block_size tokens in Python, bounding the sequence to "
        "the traced block count",
    ),
    ModelingPatch(
        "transformers.models.dbrx.modeling_dbrx",
        "DbrxExperts",
        "forward",
        dbrx_experts,
        "DBRX's experts loop over the ids hit (nonzero, then unbind): data-dependent values",
    ),
    ModelingPatch(
        "transformers.models.switch_transformers.modeling_switch_transformers",
        "SwitchTransformersExperts",
        "forward",
        switch_experts,
        "Switch Transformers' experts loop over the ids hit (nonzero, then an id as a module name): data-dependent",
    ),
)


@contextlib.contextmanager
def symbolic_sizes(model: Any, patches: tuple[ModelingPatch, ...] = MODELING_PATCHES) -> Iterator[int]:
    """Apply the patches whose class ``model`` holds an instance of; yields how many were applied.

    Raises:
        PatchTargetMissing: A patched class or method is gone from its (imported) modeling module.
    """
    classes = {type(module) for module in model.modules()} if hasattr(model, "modules") else set()
    with contextlib.ExitStack() as stack:
        applied = 0
        for patch in patches:
            module = sys.modules.get(patch.module)
            if module is None:  # no model of this type was built in this process
                continue
            holder = getattr(module, patch.holder or patch.owner, None)
            owner = module if not patch.owner else holder
            if holder is None or owner is None:
                raise PatchTargetMissing(
                    f"Patch target {patch.module}.{patch.holder or patch.owner} is gone; the workaround for "
                    f"{patch.reason} needs review."
                )
            if not any(issubclass(cls, holder) for cls in classes):
                continue
            original = getattr(owner, patch.name, None)
            if original is None:
                raise PatchTargetMissing(
                    f"Patch target {patch.owner or patch.module}.{patch.name} is gone; the workaround for {patch.reason} needs review."
                )
            stack.enter_context(patch_attribute(owner, patch.name, patch.replacement(original), reason=patch.reason))
            applied += 1
        yield applied
