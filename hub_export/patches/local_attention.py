"""CANINE's character encoder: local attention over chunks of the sequence computed as one attention with a chunk
mask, and its downsampled mask as a reshape.

``CanineAttention.forward`` (transformers/models/canine/modeling_canine.py), with ``local=True`` (CANINE's
character encoders): the queries are cut into chunks of ``attend_from_chunk_stride`` positions, each attending to
its own window of keys (``attend_to_chunk_width`` from ``i * attend_to_chunk_stride``), in a Python loop over
``range(0, seq_len, stride)``. torch.export unrolls the loop at the traced length and pins the sequence
(``InputBoundsError``, bounds ``[n, n]``).

:func:`canine_local_attention` runs the same attention for every query at once: the keys are the whole sequence
(behind the ``[CLS]`` key that ``always_attend_to_first_position`` prepends, as upstream), and a key outside the
query's window is masked with ``-inf`` after upstream's own additive padding mask, so it weighs exactly zero and each
query's softmax runs over the keys of its window only, as upstream's (a window of padding only included). The
outputs match upstream's to float32 rounding (sums over extra zeros); the attention costs ``seq_len ** 2`` scores
instead of ``seq_len * window``. Overlapping query chunks (width above stride, whose upstream output is longer than
the sequence) and ``output_attentions`` (per-chunk probabilities) run upstream's forward.

``CanineModel._downsample_attention_mask`` pools the character mask to molecules with ``torch.nn.MaxPool1d``; the
operator computes its output size on the traced length (a guard ``Eq(length, n)``), which pins the sequence too.
:func:`canine_downsampled_mask` takes the same maximum over each whole window of ``downsampling_rate`` characters
(the remainder dropped, as the pooling's floor does), gathered by index: the same values.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["canine_downsampled_mask", "canine_local_attention"]


def canine_local_attention(original: Callable[..., Any]) -> Callable[..., Any]:
    """``CanineAttention.forward`` with its local chunks as one masked attention (module docstring)."""

    def forward(self: Any, hidden_states: Any, attention_mask: Any = None, output_attentions: Any = False) -> Any:
        import torch

        seq_len = hidden_states.shape[1]
        if (
            not self.local
            or output_attentions
            or attention_mask is None
            or self.attend_from_chunk_width != self.attend_from_chunk_stride
            or isinstance(seq_len, int)  # eager: upstream's (and its check that the chunk counts agree)
            and _chunk_counts_differ(self, seq_len)
        ):
            return original(self, hidden_states, attention_mask, output_attentions)
        positions = torch.arange(seq_len, device=hidden_states.device)
        if self.first_position_attends_to_all:  # chunk 0 is the first query, attending to every key
            chunk = torch.where(positions == 0, 0, (positions - 1) // self.attend_from_chunk_stride + 1)
            start = (chunk - 1).clamp(min=0) * self.attend_to_chunk_stride
            end = torch.where(chunk == 0, seq_len, (start + self.attend_to_chunk_width).clamp(max=seq_len))
        else:
            start = positions // self.attend_from_chunk_stride * self.attend_to_chunk_stride
            end = (start + self.attend_to_chunk_width).clamp(max=seq_len)
        in_window = (positions[None, :] >= start[:, None]) & (positions[None, :] < end[:, None])  # [query, key]
        keys, mask = hidden_states, attention_mask
        if self.always_attend_to_first_position:  # upstream prepends the first key to every window
            keys = torch.cat([hidden_states[:, 0:1, :], hidden_states], dim=1)
            mask = torch.cat([attention_mask[:, :, 0:1], attention_mask], dim=2)
            in_window = torch.cat([torch.ones_like(in_window[:, :1]), in_window], dim=1)
        # upstream's conversion of a 3D mask (CanineSelfAttention.forward), then -inf outside the window
        additive = (1.0 - mask.float()) * torch.finfo(hidden_states.dtype).min
        additive = additive.to(hidden_states.dtype).unsqueeze(1).masked_fill(~in_window, float("-inf"))
        context = self.self(hidden_states, keys, additive, output_attentions)[0]
        return (self.output(context, hidden_states),)

    return forward


def _chunk_counts_differ(attention: Any, seq_len: int) -> bool:
    """Whether upstream's query and key chunk lists differ in length at ``seq_len`` (upstream raises then)."""
    first = 1 if attention.first_position_attends_to_all else 0
    queries = first + len(range(first, seq_len, attention.attend_from_chunk_stride))
    return queries != first + len(range(0, seq_len, attention.attend_to_chunk_stride))


def canine_downsampled_mask(original: Callable[..., Any]) -> Callable[..., Any]:
    """``CanineModel._downsample_attention_mask`` as a maximum over reshaped windows (module docstring)."""

    def downsample_attention_mask(self: Any, char_attention_mask: Any, downsampling_rate: int) -> Any:
        import torch

        molecules = char_attention_mask.shape[1] // downsampling_rate
        # each molecule's characters gathered by index, not sliced and reshaped: slicing off the remainder guards on
        # whether there is one (the traced length's remainder), and a reshape on the molecule count being 1
        device = char_attention_mask.device
        starts = torch.arange(molecules, device=device)[:, None] * downsampling_rate
        windows = char_attention_mask.float()[:, starts + torch.arange(downsampling_rate, device=device)]
        return windows.amax(dim=-1)

    return downsample_attention_mask
