"""Audio encoders run over chunks of the input in a Python loop, traced for the inputs of one chunk.

Nemotron 3.5 Transcribe's audio model (``Nemotron3_5TranscribeAudioModel``,
transformers/models/nemotron3_5_transcribe/modeling_nemotron3_5_transcribe.py) and the diarization model it runs
beside its speech encoder (``Nemotron3DiarizationForAudioFrameClassification.forward``,
transformers/models/nemotron3_diarization/modeling_nemotron3_diarization.py) encode a recording offline in chunks of
``chunk_length`` encoder frames, each with up to ``chunk_left_context`` / ``chunk_right_context`` frames around it:
``for start in range(0, num_frames, chunk_length)`` with ``min`` / ``max`` over the symbolic length, which pins the
length to the traced one. Each chunk's encoder sees only its window (the convolutions and the FIFO queue of the
speaker cache too), so chunks cannot become one masked pass; but a recording of at most one chunk runs the loop
once, over the whole input, with no context to take. While tracing a sample of one chunk, the patches run that one
iteration and assert the length fits (``torch._check(frames <= chunk_length)``): the export takes every length up to
one chunk (the dims say so: ``chunk_length`` encoder frames, ``subsampling_factor`` spectrogram frames each) and
refuses a longer one up front. Eager calls, longer samples and streaming calls run upstream's code. The numbers
are upstream's: the same ops on the same slices; the speaker cache's update after the last chunk, which offline mode
never returns, is not traced.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["diarization_one_chunk", "one_chunk", "transcribe_one_chunk"]


def one_chunk(frames: Any, chunk_length: int) -> bool:
    """Whether ``frames`` is a traced length whose sample fits one chunk; then it is asserted to fit."""
    import torch

    if not isinstance(frames, torch.SymInt) or frames.node.hint is None or frames.node.hint > chunk_length:
        return False
    torch._check(frames <= chunk_length)
    return True


def transcribe_one_chunk(original: Callable[..., Any]) -> Callable[..., Any]:
    """``Nemotron3_5TranscribeAudioModel._get_chunks``: one chunk (the whole input) for a traced length that fits."""

    def get_chunks(self: Any, num_frames: Any) -> list[tuple[slice, slice]]:
        if not one_chunk(num_frames, self.config.diarization_config.chunk_length):
            return original(self, num_frames)
        # upstream's one iteration: start 0, end min(chunk_length, n) = n, context [0, min(n + right, n)) = [0, n)
        return [(slice(0, num_frames), slice(0, num_frames))]

    return get_chunks


def diarization_one_chunk(original: Callable[..., Any]) -> Callable[..., Any]:
    """``Nemotron3DiarizationForAudioFrameClassification.forward`` offline over one chunk (a traced length that fits)."""
    from transformers.utils import can_return_tuple

    @can_return_tuple
    def forward(
        self: Any,
        input_features: Any,
        attention_mask: Any = None,
        speaker_cache: Any = None,
        num_lookahead_frames: Any = None,
        num_lookback_frames: Any = None,
        **kwargs: Any,
    ) -> Any:
        import torch

        streaming = num_lookahead_frames is not None or num_lookback_frames is not None or speaker_cache is not None
        frames = input_features.shape[1]
        if streaming or not isinstance(frames, torch.SymInt):
            return original(
                self, input_features, attention_mask, speaker_cache, num_lookahead_frames, num_lookback_frames, **kwargs
            )
        inputs_embeds = self.model.audio_tower.embedder(input_features)
        num_embeds = inputs_embeds.shape[1]
        if not one_chunk(num_embeds, self.config.chunk_length):  # the embeddings above are left unused
            return original(
                self, input_features, attention_mask, speaker_cache, num_lookahead_frames, num_lookback_frames, **kwargs
            )
        from transformers.models.nemotron3_diarization.modeling_nemotron3_diarization import (
            Nemotron3DiarizationOutput,
            Nemotron3DiarizationSpeakerCache,
        )

        subsampling_factor = self.config.audio_config.subsampling_factor
        sizes = {"fifo_length": self.config.fifo_length}
        sizes["speaker_cache_update_period"] = self.config.speaker_cache_update_period
        speaker_cache = Nemotron3DiarizationSpeakerCache(self.config.streaming_config, **sizes)
        batch_size = input_features.shape[0]
        embed_mask = None if attention_mask is None else attention_mask[:, ::subsampling_factor].bool()
        # upstream's one iteration: start 0, end n, context [0, min(n + right, n)) = [0, n), no look-back
        chunk_embeds = inputs_embeds[:, 0:num_embeds]
        cached_embeds = speaker_cache.get_embeds(chunk_embeds)
        cached_length = cached_embeds.shape[1]
        chunk_input_embeds = torch.cat([cached_embeds, chunk_embeds], dim=1)
        step_mask = None
        if embed_mask is not None:
            chunk_mask = embed_mask[:, 0 : chunk_embeds.shape[1]]
            step_mask = torch.cat([chunk_mask.new_ones(batch_size, cached_length), chunk_mask], dim=1)
        position_ids = torch.arange(chunk_input_embeds.shape[1], device=chunk_input_embeds.device)[None, :]
        outputs = self.model(
            inputs_embeds=chunk_input_embeds, attention_mask=step_mask, position_ids=position_ids, **kwargs
        )
        chunk_logits = self.classifier(outputs.last_hidden_state)
        start_logit_idx = cached_length * subsampling_factor
        logits = chunk_logits[:, start_logit_idx : start_logit_idx + num_embeds * subsampling_factor]
        return Nemotron3DiarizationOutput(
            logits=logits[:, :frames],
            hidden_states=tuple(outputs.hidden_states or ()) or None,
            attentions=tuple(outputs.attentions or ()) or None,
            speaker_cache=None,
        )

    return forward
