"""The audio codecs (the SEANet ones: EnCodec, Mimi, PocketTTS; NeuCodec) traced with the length symbolic.

Their padded 1-D convolutions compute the pad widths on Python integers (below), and EnCodec's encode without
chunks runs its one chunk without a Python loop over the length (:func:`encodec_encode_one_chunk`).

``EncodecConv1d.forward`` (transformers/models/encodec/modeling_encodec.py) and its copies ``MimiConv1d`` and
``PocketTTSAudioTokenizerConv1d`` keep their stride, effective kernel size and total padding as int64 tensor buffers
and compute the right padding with tensor arithmetic (``_get_extra_padding_for_conv1d``:
``ceil((length - kernel + padding_total) / stride + 1) - 1``...). ``torch.nn.functional.pad`` then reads those
tensors back as Python integers: while tracing each read is a data-dependent value (``u0``), so the first branch on
it (``if length <= max_pad`` in ``_pad1d``, or the attention's ``q_len > 1`` further on) raises
``GuardOnDataDependentSymNode``. The buffers only ever hold the convolution's own stride and kernel size, which the
wrapped ``nn.Conv1d`` carries as Python integers, and with ``padding_total = kernel - stride`` upstream's extra
padding reduces to ``ceil(length / stride) * stride - length`` (floor divisions only: the output sizes stay in the
grammar of ``export.json``). The patched ``forward`` pads
by those integers (the sequence stays symbolic) and then runs upstream's own convolution and normalization: the
same ops on the same pad widths, so eager results are bit-identical. A call with a streaming ``padding_cache`` runs
upstream's code.

``NeuCodecModel.forward`` (transformers/models/neucodec/modeling_neucodec.py) cuts the decoded audio to
``int(input_length * self.sample_rate_conversion_factor)`` (``output_sampling_rate / input_sampling_rate``, 1.5 for
16 kHz in, 24 kHz out): the symbolic length times a Python float is a symbolic float, and ``int()`` of it pins the
length to the traced one. :func:`neucodec_output_length_on_integers` computes that length as
``input_length * output_rate // input_rate``, a floor division the sizes of ``export.json`` can say. It is the
same integer where the rates' ratio is a binary fraction (1.5: the float product of a length and the ratio is then
exact, and ``int`` truncates a positive number as ``//`` floors it); other ratios run upstream's ``forward``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = [
    "CONV_PADDING_CLASSES",
    "conv1d_padded_on_integers",
    "encodec_encode_one_chunk",
    "neucodec_output_length_on_integers",
]

#: (modeling module's model type, class) of every SEANet convolution computing its padding on tensor buffers
CONV_PADDING_CLASSES: tuple[tuple[str, str], ...] = (
    ("encodec", "EncodecConv1d"),
    ("mimi", "MimiConv1d"),
    ("pocket_tts_audio_tokenizer", "PocketTTSAudioTokenizerConv1d"),
)


def paddings(conv: Any, causal: bool, length: Any) -> tuple[Any, Any]:
    """The (left, right) pad widths upstream's ``forward`` computes on its buffers, from ``conv``'s integers.

    Args:
        conv: The wrapped ``nn.Conv1d`` (its ``stride``, ``kernel_size`` and ``dilation`` are Python integers).
        causal: Whether the convolution pads on the left only (``config.use_causal_conv``).
        length: The input's last size (an int or a symbolic size).

    Returns:
        The left and right pad widths.
    """
    stride = conv.stride[0]
    kernel = (conv.kernel_size[0] - 1) * conv.dilation[0] + 1  # upstream's effective kernel size
    total = kernel - stride
    extra = (length + stride - 1) // stride * stride - length  # ceil(length / stride) * stride - length
    if causal:
        return total, extra
    right = total // 2
    return total - right, right + extra


def conv1d_padded_on_integers(original: Callable[..., Any]) -> Callable[..., Any]:
    """``forward`` of a SEANet ``Conv1d`` padding by Python integers instead of its int64 buffers."""

    def forward(self: Any, hidden_states: Any, padding_cache: Any = None) -> Any:
        if padding_cache is not None:  # streaming: upstream's own path (concatenates the cached frames)
            return original(self, hidden_states, padding_cache)
        widths = paddings(self.conv, self.causal, hidden_states.shape[-1])
        hidden_states = self.conv(self._pad1d(hidden_states, widths, mode=self.pad_mode))
        if getattr(self, "norm_type", None) == "time_group_norm":  # EnCodec's optional normalization
            hidden_states = self.norm(hidden_states)
        return hidden_states

    return forward


def encodec_encode_one_chunk(original: Callable[..., Any]) -> Callable[..., Any]:
    """``EncodecModel.encode`` without the Python loop over chunks when the whole input is one chunk.

    Upstream (transformers/models/encodec/modeling_encodec.py) loops ``for offset in range(0, input_length,
    stride)`` with ``stride = input_length`` when ``config.chunk_length`` is None (the 24 kHz model): the loop runs
    once, at offset 0, but ``range`` over the traced length pins it. The patch runs that one iteration; a model with
    chunks runs upstream's loop.
    """

    def encode(
        self: Any, input_values: Any, padding_mask: Any = None, bandwidth: Any = None, return_dict: Any = None
    ) -> Any:
        if self.config.chunk_length is not None:
            return original(self, input_values, padding_mask, bandwidth, return_dict)
        import torch
        from transformers.models.encodec.modeling_encodec import EncodecEncoderOutput

        return_dict = return_dict if return_dict is not None else self.config.return_dict
        bandwidth = self.config.target_bandwidths[0] if bandwidth is None else bandwidth
        if bandwidth not in self.config.target_bandwidths:
            raise ValueError(
                f"This model doesn't support the bandwidth {bandwidth}. Select one of {self.config.target_bandwidths}."
            )
        channels = input_values.shape[1]
        if channels < 1 or channels > 2:
            raise ValueError(f"Number of audio channels must be 1 or 2, but got {channels}")
        if padding_mask is None:
            padding_mask = torch.ones_like(input_values).bool()
        else:
            padding_mask = padding_mask.view(padding_mask.shape[0], -1, padding_mask.shape[-1])
        encoded_frame, scale = self._encode_frame(padding_mask.bool() * input_values, bandwidth)
        encoded_frames, scales = torch.stack([encoded_frame]), [scale]
        if not return_dict:
            return (encoded_frames, scales, 0)
        output: Any = EncodecEncoderOutput  # upstream's own call (a list of scales where its hints say a tensor)
        return output(encoded_frames, scales, 0)

    return encode


def _exact_ratio(output_rate: Any, input_rate: Any) -> Any:
    """``output_rate / input_rate`` as a ``Fraction`` where both are positive integers and the float quotient is that
    fraction exactly (so ``int(length * quotient)`` is ``length * numerator // denominator``); else None."""
    from fractions import Fraction

    if not all(isinstance(rate, int) and rate > 0 for rate in (output_rate, input_rate)):
        return None
    ratio = Fraction(output_rate, input_rate)
    return ratio if Fraction(output_rate / input_rate) == ratio else None


def neucodec_output_length_on_integers(original: Callable[..., Any]) -> Callable[..., Any]:
    """``NeuCodecModel.forward`` with the decoded audio cut to ``input_length * out_rate // in_rate`` (integers).

    Upstream computes ``int(input_length * (out_rate / in_rate))`` on a Python float, which pins the length while
    tracing. A config whose rates are not integers with a binary-fraction ratio runs upstream's own ``forward``.
    """
    from transformers.utils import can_return_tuple

    @can_return_tuple
    def forward(
        self: Any,
        input_values: Any,
        input_features: Any,
        padding_mask: Any = None,
        input_features_mask: Any = None,
        output_latents: bool = False,
        **kwargs: Any,
    ) -> Any:
        ratio = _exact_ratio(self.config.output_sampling_rate, self.config.input_sampling_rate)
        if ratio is None:
            return original(
                self, input_values, input_features, padding_mask, input_features_mask, output_latents, **kwargs
            )
        from transformers.models.neucodec.modeling_neucodec import NeuCodecOutput

        output_length = input_values.shape[-1] * ratio.numerator // ratio.denominator
        encoder_outputs = self.encode(
            input_values,
            input_features=input_features,
            padding_mask=padding_mask,
            input_features_mask=input_features_mask,
            output_latents=True,
            return_dict=True,
        )
        audio_values = self.decode(
            latents=encoder_outputs.latents,
            audio_codes_mask=encoder_outputs.audio_codes_mask,
            return_dict=True,
            **kwargs,
        )[0][..., :output_length]
        return NeuCodecOutput(
            audio_values=audio_values,
            audio_codes=encoder_outputs.audio_codes,
            latents=encoder_outputs.latents if output_latents else None,
            audio_codes_mask=encoder_outputs.audio_codes_mask,
        )

    return forward
